package cli

import "github.com/spf13/cobra"

// newManagerCmd is `fednet manager` (internal/manager).
func newManagerCmd() *cobra.Command {
	return &cobra.Command{Use: "manager", Short: "Run the manager (not yet)", Hidden: true}
}
