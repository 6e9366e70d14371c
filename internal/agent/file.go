package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/fednet/fednet/internal/plan"
)

// DefaultFilePoll is how often a FileSource looks at its plan file.
const DefaultFilePoll = time.Second

// FileConfig configures a FileSource.
type FileConfig struct {
	// Path is a plan in the JSON form of `fednet plan -o json`. Required.
	Path string
	// Reload, when it receives, makes the source read Path at once and
	// deliver it, changed or not (the CLI sends on SIGHUP).
	Reload <-chan struct{}
	// Poll is how often the file's content is compared with what was read
	// last (default DefaultFilePoll).
	Poll time.Duration
}

// FileSource is the Source of static mode: a plan file. Run delivers the
// file's plan at once; a first plan that cannot be read or decoded (also
// one of a newer plan format) is Run's error. After that it delivers the
// plan again whenever the file's content changes to a different plan (the
// content is compared: modification times are too coarse to tell two
// quick writes apart, and plan files are small) and on every Reload. A
// later file that cannot be read or decoded is delivered as a refusal
// (Update.Err): the plan in force stays, and the next good file is
// applied.
type FileSource struct {
	cfg FileConfig
}

// NewFileSource returns a plan file source.
func NewFileSource(cfg FileConfig) (*FileSource, error) {
	if cfg.Path == "" {
		return nil, errors.New("agent: FileConfig.Path is required")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultFilePoll
	}
	return &FileSource{cfg: cfg}, nil
}

// Run implements Source.
func (s *FileSource) Run(ctx context.Context, deliver Deliver) error {
	last, g, err := readPlanFile(s.cfg.Path)
	if err != nil {
		return err
	}
	deliver(Update{Plan: &g, Why: "start"})
	delivered, refusing := g, false

	poll := time.NewTicker(s.cfg.Poll)
	defer poll.Stop()
	for {
		var why string
		select {
		case <-ctx.Done():
			return nil
		case <-s.cfg.Reload:
			why = "reload"
		case <-poll.C:
			data, err := os.ReadFile(s.cfg.Path)
			if err != nil || bytes.Equal(data, last) {
				continue
			}
			why = "plan file changed"
		}
		data, g, err := readPlanFile(s.cfg.Path)
		last = data
		switch {
		case err != nil:
			refusing = true
			deliver(Update{Why: why, Err: err})
		case why == "reload" || refusing || !reflect.DeepEqual(g, delivered):
			delivered, refusing = g, false
			deliver(Update{Plan: &g, Why: why})
		}
	}
}

// LoadPlan reads and decodes a plan file.
func LoadPlan(path string) (plan.Gateway, error) {
	_, g, err := readPlanFile(path)
	return g, err
}

// readPlanFile reads a plan file and decodes what it read; data is nil
// when the file cannot be read.
func readPlanFile(path string) (data []byte, g plan.Gateway, err error) {
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, g, fmt.Errorf("reading plan: %w", err)
	}
	if g, err = plan.Decode(data); err != nil {
		return data, g, fmt.Errorf("%s: %w", path, err)
	}
	return data, g, nil
}
