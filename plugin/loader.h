// Loads a user's attention kernel from a shared library through the C ABI of
// plugin/attnkit_plugin.h and wraps it as a Backend, so the campaign runs it
// exactly like a built-in one.
#ifndef ATTNKIT_PLUGIN_LOADER_H_
#define ATTNKIT_PLUGIN_LOADER_H_

#include <memory>
#include <string>

#include "runtime/backend.h"
#include "runtime/status.h"

namespace attnkit::plugin {

// dlopen()s `path`, resolves attnkit_plugin_v1, checks the table (ABI
// version, size, required entries, name) and creates one instance. Errors
// name the path and what is wrong: NOT_FOUND for a missing file,
// INVALID_ARGUMENT for a library that is not a (compatible) plug-in. The
// returned backend keeps the library loaded until it is destroyed. Its
// AppendKv calls the table's append_kv when the table has one (struct_size
// covers the field and it is not NULL), else attnkit's portable append.
// SupportsBlock / AttentionBlock call the table's supports_block /
// attention_block the same way, and answer UNIMPLEMENTED (saying why) when
// it has no attention_block; AttentionBlock validates with
// ValidateBlockArgs before the plug-in sees anything.
StatusOr<std::unique_ptr<Backend>> LoadPlugin(const std::string& path);

}  // namespace attnkit::plugin

#endif  // ATTNKIT_PLUGIN_LOADER_H_
