// Package conffile reads the files that the configuration names (CA bundles, client certificates
// and keys, token files) without ever blocking on them.
//
// Input: a path as the user configured it, and the most bytes the caller accepts.
//
// Output: the file's bytes (Read), or only the verdict (Check). A path that names a named pipe
// (FIFO), a device, a socket or a directory is refused with an error that says what it is, and a
// file larger than the bound is refused with the bound named; a regular file is read whole.
//
// Guarantee: neither call waits for a writer or a device. The file is opened with O_NONBLOCK,
// which makes opening a FIFO return at once, and its type is taken from the open descriptor
// (fstat), so a path swapped between a check and the open cannot slip a FIFO in.
package conffile
