#pragma once
// Helpers shared by the trainer's .cpp files that read files and PyTorch
// archives and turn library errors into one-line messages.

#include <exception>
#include <string>
#include <vector>

namespace c10 {
struct IValue;
}

namespace volshard::detail {

/// The first line of an exception's message (c10 errors append a backtrace).
std::string first_line(const std::exception& e);

/// torch::jit::pickle_load, its failure rethrown as std::runtime_error
/// "<what>: not a readable <kind> (<first line of the reason>)".
c10::IValue unpickle(const std::vector<char>& bytes, const std::string& what,
                     const std::string& kind);

/// The bytes of a torch.save zip archive holding `value`, as
/// torch::jit::pickle_save writes them but with plain dicts and lists: no
/// torch.jit._pickle.restore_type_tag, which torch.load's default
/// (weights_only=True, torch >= 2.6) refuses. Tensors are copied to the CPU.
std::vector<char> pickle_archive(const c10::IValue& value);

}  // namespace volshard::detail
