// sigbus_guard.cpp - SIGBUS during a guarded read jumps back to the read's caller.
#include "sigbus_guard.hpp"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstring>

#include <unistd.h>

namespace shm_compositor {

namespace {

struct guarded_read {
    sigjmp_buf resume;
    const std::byte* begin;
    const std::byte* end;
};

// Set only around a guarded read. A pointer, so the TLS slot needs no constructor and is safe to read
// from the signal handler.
thread_local guarded_read* active_read = nullptr;
struct sigaction previous_action {};

void on_sigbus(int signal, siginfo_t* info, void* context) {
    guarded_read* read = active_read;
    const auto* addr = static_cast<const std::byte*>(info->si_addr);
    if (read != nullptr && addr >= read->begin && addr < read->end) siglongjmp(read->resume, 1);
    // Not a client buffer: restore what was there and return, so the fault repeats and takes it.
    static_cast<void>(signal);
    static_cast<void>(context);
    ::sigaction(SIGBUS, &previous_action, nullptr);
}

std::size_t page_size() noexcept {
    static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return size;
}

std::uint64_t word_at(const std::byte* at) noexcept {
    std::uint64_t word = 0;
    std::memcpy(&word, at, sizeof word);
    return word;
}

// Out of line so nothing of it is kept in registers across the sigsetjmp in the caller.
[[gnu::noinline]] std::uint64_t page_checksum(std::span<const std::byte> bytes) noexcept {
    std::uint64_t sum = 0;
    const std::size_t page = page_size();
    if (bytes.size() < sizeof(std::uint64_t)) return 0;
    for (std::size_t at = 0; at + sizeof(std::uint64_t) <= bytes.size(); at += page) sum += word_at(bytes.data() + at);
    return sum + word_at(bytes.data() + bytes.size() - sizeof(std::uint64_t));  // the last page, if cut
}

}  // namespace

bool install_sigbus_guard() noexcept {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    // SA_NODEFER: siglongjmp leaves the handler without restoring the signal mask (sigsetjmp(.., 0)
    // saves a syscall per read), so SIGBUS must not be blocked while the handler runs.
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    return ::sigaction(SIGBUS, &action, &previous_action) == 0;
}

bool guarded_page_checksum(std::span<const std::byte> bytes, std::uint64_t& sum) noexcept {
    guarded_read read;
    read.begin = bytes.data();
    read.end = bytes.data() + bytes.size();
    if (sigsetjmp(read.resume, 0) != 0) {
        active_read = nullptr;
        return false;
    }
    active_read = &read;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    sum = page_checksum(bytes);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    active_read = nullptr;
    return true;
}

}  // namespace shm_compositor
