// Package closeonexec keeps the file descriptors a process inherited out of
// the processes it starts.
//
// Go opens every file close-on-exec, so a Go program's children get only
// standard input, output and error (and ExtraFiles). A descriptor the
// program itself inherited without close-on-exec, though, passes on to
// every child: `flock LOCK fednet lab up` hands its lock to the lab's
// agents and userspace WireGuard processes, which outlive the command and
// hold the lock until they die. fednet starts long-lived processes (the
// agent starts `fednet wgdev`, the lab starts agents), so it drops what it
// inherited before starting any.
package closeonexec

// Inherited marks every open file descriptor above 2 close-on-exec. Call it
// first thing in main (or TestMain), before other goroutines open files.
// It is best effort: on platforms without /proc/self/fd it does nothing.
func Inherited() { inherited() }
