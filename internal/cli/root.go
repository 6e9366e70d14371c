// Package cli holds fednet's subcommands. Commands are thin: they parse
// flags, call the packages that do the work, and print.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/closeonexec"
	"github.com/fednet/fednet/internal/spec"
)

// Main runs the command line and returns the process exit status.
func Main(args []string) int {
	closeonexec.Inherited()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRoot()
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "fednet: %v\n", err)
		var exit exitError
		if errors.As(err, &exit) {
			return int(exit)
		}
		return 1
	}
	return 0
}

// onStop runs f once ctx ends (the daemons: SIGINT or SIGTERM, see Main).
// The returned function, for the command to defer, cancels f if ctx has not
// ended, else waits for f to finish, so that its line is out before the
// process exits.
func onStop(ctx context.Context, f func()) (done func()) {
	finished := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(finished)
		f()
	})
	return func() {
		if !stop() {
			<-finished
		}
	}
}

// exitError carries a specific exit status; its message is already printed.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// NewRoot returns the root command with every subcommand.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "fednet",
		Short: "Join networks in different places into one private, encrypted overlay",
		Long: `fednet joins networks that live in different places (public clouds, private
clouds, on-premise LANs, edge sites) into one private, encrypted overlay.

One gateway per site runs "fednet agent"; gateways build a full mesh of
WireGuard tunnels and route the site networks together. You describe the
federation once in a spec (YAML); "fednet plan" turns it into the desired state
of each gateway, and the agent applies that state to the gateway's kernel.

Start with "fednet lab demo" to see a three-site federation on this machine.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newPlanCmd(), newKeygenCmd(), newPubkeyCmd(), newAgentCmd(), newWgdevCmd(), newLabCmd(), newManagerCmd(), newHostCmd(), newBenchCmd(), newProbeCmd())
	root.AddCommand(newOperatorCmds()...)
	root.AddCommand(newCloudCmd(), newDocsCmd(), newExternalCmd())
	return root
}

// readSpec reads and parses a spec file; errors name the file.
func readSpec(path string) (*spec.Federation, error) {
	if path == "" {
		return nil, errors.New("no spec given; pass -f spec.yaml (see examples/three-sites.yaml)")
	}
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading spec: %w", err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s is not a valid spec:\n%w", path, err)
	}
	return f, nil
}
