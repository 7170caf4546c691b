#pragma once
// c10's allocation failures named as volshard's own (core/limits.h): where a
// caller knows the file or the step, it runs the work through
// naming_allocation_failures, which catches both std::bad_alloc and c10::Error
// and says which.

#include <c10/util/Exception.h>

#include <cstddef>
#include <new>
#include <string>

#include "volshard/core/limits.h"

namespace volshard {

/// Whether `e` is a failed allocation: a c10::OutOfMemoryError (a device's),
/// or c10's DefaultCPUAllocator refusing ("can't allocate memory: you tried to
/// allocate N bytes", an enforce of posix_memalign's result).
bool is_out_of_memory(const c10::Error& e);

/// The bytes c10's CPU allocator was asked for, read from its message; 0 for
/// another's (a device's), whose message says it otherwise.
size_t bytes_asked(const c10::Error& e);

/// Called in a handler of `e`: where `e` is a failed allocation
/// (is_out_of_memory), throws what it means in `context` (a file, a step):
/// the CPU allocator's as OutOfMemoryError, "context: could not allocate
/// <size> (N bytes): <memory available>" as volshard's own allocator says it
/// (where tune_allocator_for_volumes is not installed, c10's is used); a
/// device's (CUDA) as std::runtime_error "context: <c10's text>", without its
/// C++ backtrace. Any other error is rethrown as it is.
[[noreturn]] void rethrow_naming_out_of_memory(const std::string& context, const c10::Error& e);

/// Runs `body` and returns what it returns; an allocation it cannot make,
/// volshard's (std::bad_alloc) or c10's, is thrown as what it means in
/// `context()` (OutOfMemoryError, or as rethrow_naming_out_of_memory says).
/// `context` (a callable giving the file or the step) is called on a failure
/// only; any other error passes as it is.
template <typename Context, typename Body>
decltype(auto) naming_allocation_failures(const Context& context, Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc& e) {
    throw OutOfMemoryError(context(), e);
  } catch (const c10::Error& e) {
    rethrow_naming_out_of_memory(context(), e);
  }
}

}  // namespace volshard
