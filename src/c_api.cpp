// The C API as a library, for hosts that would rather link than include c_api_impl.hpp themselves.
#include <deferred_unmap/c_api_impl.hpp>
