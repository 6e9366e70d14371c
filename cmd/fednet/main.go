// Command fednet federates site networks into one encrypted overlay. See
// `fednet --help` and README.md.
package main

import (
	"os"

	"github.com/fednet/fednet/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
