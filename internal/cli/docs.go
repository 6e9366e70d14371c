package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newDocsCmd is the hidden `fednet docs`: the command reference generated
// from the command tree, as man pages (what the packages install) or
// markdown.
func newDocsCmd() *cobra.Command {
	var man, markdown string
	cmd := &cobra.Command{
		Use:    "docs (--man DIR | --markdown DIR)",
		Short:  "Write the command reference as man pages or markdown (for packaging)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if man == "" && markdown == "" {
				return errors.New("give --man DIR or --markdown DIR")
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			if man != "" {
				if err := os.MkdirAll(man, 0o755); err != nil {
					return err
				}
				header := &doc.GenManHeader{Title: "FEDNET", Section: "1", Source: "fednet", Manual: "fednet manual"}
				if err := doc.GenManTree(root, header, man); err != nil {
					return fmt.Errorf("writing man pages: %w", err)
				}
			}
			if markdown != "" {
				if err := os.MkdirAll(markdown, 0o755); err != nil {
					return err
				}
				if err := doc.GenMarkdownTree(root, markdown); err != nil {
					return fmt.Errorf("writing markdown: %w", err)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&man, "man", "", "directory for the man pages (section 1)")
	cmd.Flags().StringVar(&markdown, "markdown", "", "directory for the markdown reference")
	return cmd
}
