// sigbus_guard.hpp - reading client memory that the client may truncate under the compositor.
//
// A client owns its memfd and can ftruncate it smaller at any time; a read of the compositor's
// mapping past the new end raises SIGBUS, which would kill the compositor and every client with it.
// libwayland (wl_shm_buffer_begin_access) and KWin guard such reads; this is the same guard with
// sigsetjmp: a SIGBUS inside a guarded range on the reading thread returns false from the read, and
// the caller posts a protocol error to that client. Any other SIGBUS still takes the default action.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace shm_compositor {

/// Installs the SIGBUS handler. Call once, before any guarded read. Returns false if sigaction failed.
bool install_sigbus_guard() noexcept;

/// Sums one 8-byte word from the start of every page `bytes` touches (so every page is really read),
/// into `sum`. False when the client truncated the memory under us: `sum` is then unspecified.
/// Any thread (the guard is per thread); not reentrant.
bool guarded_page_checksum(std::span<const std::byte> bytes, std::uint64_t& sum) noexcept;

}  // namespace shm_compositor
