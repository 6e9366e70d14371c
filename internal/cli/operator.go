package cli

import "github.com/spf13/cobra"

// newOperatorCmds are the commands that talk to a manager.
func newOperatorCmds() []*cobra.Command { return nil }
