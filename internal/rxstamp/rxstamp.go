// Package rxstamp gives received packets the time the kernel took them in
// (SO_TIMESTAMPNS), so that a delay measured from them leaves out how long
// the program took to read them: on a busy machine, milliseconds.
package rxstamp
