// Names the calling thread for `top -H`, `ps -L`, gdb and /proc/PID/task/*/comm. A
// daemon's threads are named by what they do (docs/architecture.md, "Threads and locks");
// a thread started by a named one inherits its name until it names itself.
// Linux keeps 15 characters; the rest is cut.
#pragma once

#include <pthread.h>

#include <string>

namespace pfsnet {

inline void name_this_thread(const std::string& name) {
  (void)pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace pfsnet
