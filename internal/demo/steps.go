package demo

import (
	"fmt"
	"io"
	"os"
	"time"
)

// stepper returns a function that writes one progress line to out (nil
// discards), stamped with the seconds since start.
func stepper(out io.Writer, start time.Time) func(format string, args ...any) {
	if out == nil {
		out = io.Discard
	}
	return func(format string, args ...any) {
		fmt.Fprintf(out, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
}

// checker returns a function that records a check in *checks and writes
// it as a step, marked ok or FAIL.
func checker(checks *[]Check, step func(string, ...any)) func(name string, ok bool, format string, args ...any) {
	return func(name string, ok bool, format string, args ...any) {
		c := Check{Name: name, Passed: ok, Detail: fmt.Sprintf(format, args...)}
		*checks = append(*checks, c)
		mark := "ok  "
		if !ok {
			mark = "FAIL"
		}
		step("%s %s: %s", mark, name, c.Detail)
	}
}

// binaryOr returns bin, or this executable when bin is empty.
func binaryOr(bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the fednet executable: %w", err)
	}
	return exe, nil
}
