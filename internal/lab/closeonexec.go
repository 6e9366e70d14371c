package lab

import "github.com/fednet/fednet/internal/closeonexec"

// A lab starts processes that outlive the command or test that built it
// (agents, userspace WireGuard devices). They must not inherit what that
// program inherited, such as a `flock` lock around `go test` or `fednet
// lab up`, which they would hold until they die.
func init() { closeonexec.Inherited() }
