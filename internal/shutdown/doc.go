// Package shutdown turns SIGTERM and SIGINT into a stop for Tidemark's long-running commands
// (cdc run, tidemark-apply). The first signal ends the context the command works under, and the
// command stops in order; a second signal exits at once, and so does an optional bound passing
// after the first. A forced exit abandons the command's goroutine: the process exits with the
// shell's 128+n for a second signal, or ExitBound when the bound passed.
//
// Input: a channel of signals (signal.Notify's; nil in tests that need none). Output: the
// command's context and, from Await, the process's exit code. What a forced exit leaves for the
// next start is the command's to say (Options.Aftermath), in the log line it writes.
package shutdown
