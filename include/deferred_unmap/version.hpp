// deferred_unmap/version.hpp - the library's version, for feature checks in hosts.
//
//   #if DEFERRED_UNMAP_VERSION >= 100  // 0.1.0
//   queue.drain(budget);
//   #endif
//   static_assert(deferred_unmap::version_major == 0);
//   std::puts(DEFERRED_UNMAP_VERSION_STRING);
#pragma once

#define DEFERRED_UNMAP_VERSION_MAJOR 0
#define DEFERRED_UNMAP_VERSION_MINOR 1
#define DEFERRED_UNMAP_VERSION_PATCH 0
#define DEFERRED_UNMAP_VERSION (DEFERRED_UNMAP_VERSION_MAJOR * 10000 + DEFERRED_UNMAP_VERSION_MINOR * 100 + DEFERRED_UNMAP_VERSION_PATCH)
#define DEFERRED_UNMAP_VERSION_STRING "0.1.0"

namespace deferred_unmap {
inline constexpr int version_major = DEFERRED_UNMAP_VERSION_MAJOR;
inline constexpr int version_minor = DEFERRED_UNMAP_VERSION_MINOR;
inline constexpr int version_patch = DEFERRED_UNMAP_VERSION_PATCH;
}  // namespace deferred_unmap
