package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// run runs one fault: probes on every pair, a baseline (every pair
// answers), a TCP transfer over the fault's path, the injection, the
// hold, the repair, the wait for every pair to answer again, the end of
// the transfer; then the figures.
func (r *runner) run(ctx context.Context, name string) Result {
	res := Result{Name: name, Manager: ManagerRunning}
	if r.managerDown {
		res.Manager = ManagerDown
	}
	if err := r.m.AgentsAlive(); err != nil {
		res.Error = err.Error()
		return res
	}
	in, err := r.prepare(ctx, name)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Target = in.target
	if in.manager != "" {
		res.Manager = in.manager
	}
	res.Path = in.client.Name + " -> " + in.server.Name
	if in.hold == 0 {
		in.hold = r.cfg.Hold
	}
	if in.cleanup != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := in.cleanup(cctx); err != nil {
				res.Error = joinMsg(res.Error, "cleanup: "+err.Error())
			}
		}()
	}

	prober, err := lab.StartProber(r.targets, r.cfg.Interval)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer prober.Stop()
	if err := r.waitAnswering(ctx, prober, prober.Start(), r.cfg.BaselineTimeout); err != nil {
		res.Error = "before the fault: " + err.Error()
		return res
	}
	after := r.cfg.After
	if in.wayBack {
		after = max(after, WayBackAfter)
	}
	transfer, err := lab.StartTransfer(ctx, in.client, in.server, addrOf(in.server), lab.TransferConfig{
		Duration: r.cfg.Settle + in.lasts + in.hold + after,
		Rate:     r.cfg.TransferRate,
	})
	if err != nil {
		res.Error = err.Error()
		return res
	}
	if err := sleepUntil(ctx, time.Now().Add(r.cfg.Settle)); err != nil {
		res.Error = err.Error()
		return res
	}

	var logs *logMark
	if in.countPaths {
		logs = markLogs(r.l)
	}
	injected := time.Now()
	if err := in.inject(ctx); err != nil {
		res.Error = "injecting: " + err.Error()
	}
	r.step("%s: %s failed at %s", name, in.target, injected.Format("15:04:05.000"))
	repaired := injected
	if in.repair != nil {
		if err := sleepUntil(ctx, time.Now().Add(in.hold)); err != nil {
			res.Error = joinMsg(res.Error, err.Error())
		}
		// The repair runs even when the injection failed half-way.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		repaired = time.Now()
		err := in.repair(rctx)
		cancel()
		if err != nil {
			res.Error = joinMsg(res.Error, "repairing: "+err.Error())
		}
		r.step("%s: repaired at %s", name, repaired.Format("15:04:05.000"))
	}
	res.HeldMs = millis(repaired.Sub(injected))
	answering := r.waitAnswering(ctx, prober, repaired, r.cfg.RecoverTimeout)
	var verifyErr error
	if answering == nil && in.verify != nil {
		verifyErr = in.verify(ctx)
	}
	tr, trErr := transfer.Wait()
	probeLogs := prober.Stop()
	if logs != nil {
		n := r.cfg.PathChanges(logs.since())
		res.PathChanges = &n
		res.LinkChanges = in.linkChanges
	}

	concerned, err := r.concerned(ctx, in.blast)
	if err != nil {
		res.Error = joinMsg(res.Error, err.Error())
		return res
	}
	start := prober.Start()
	var down []bool
	if len(in.blast.SitesDown) > 0 {
		down = make([]bool, len(r.pairs))
		for i, p := range r.pairs {
			down[i] = in.blast.down(p)
		}
	}
	recoveredAt, ok := measure(&res, probeLogs, r.pairs, concerned, down, injected.Sub(start), repaired.Sub(start))
	if in.wayBack {
		n := lostAfter(probeLogs, repaired.Sub(start))
		res.WayBackLost = &n
	}
	if verifyErr != nil {
		res.Recovered = false
		res.Error = joinMsg(res.Error, verifyErr.Error())
	}
	switch {
	case trErr != nil:
		res.TCPDetail = trErr.Error()
	case !ok:
		res.TCPDetail = "the path never came back"
	default:
		// Bytes after the path came back: the same connection carried on.
		after := start.Add(recoveredAt).Sub(transfer.Start)
		if n := tr.BytesAfter(after); n > 0 {
			res.TCPSurvived = true
		} else {
			res.TCPDetail = fmt.Sprintf("no byte arrived after the path came back %.1f s into the transfer", after.Seconds())
		}
	}
	if r.haSite != "" {
		if h, err := r.l.VirtualAddressHolders(ctx, r.haSite); err == nil {
			var names []string
			for _, n := range h {
				names = append(names, n.Name)
			}
			res.VirtualAddressHolder = strings.Join(names, ",")
		}
		if !r.managerDown {
			if err := r.siteStatus(ctx, &res); err != nil {
				res.Error = joinMsg(res.Error, "reading the sites from the manager: "+err.Error())
			}
		}
	}
	return res
}

// siteStatus reads what the manager shows of the HA site into res,
// polling until it names the virtual address's holder as the active
// gateway (status reports follow each apply, and come every 5 s) or 15 s
// pass.
func (r *runner) siteStatus(ctx context.Context, res *Result) error {
	cl, err := r.m.ClientAs(r.m.AdminToken())
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		sites, err := cl.Sites(ctx)
		if err != nil {
			return err
		}
		for _, s := range sites {
			if s.Name == r.haSite {
				res.SiteActive, res.LastFailover = s.Active, s.LastFailover
			}
		}
		if res.SiteActive == res.VirtualAddressHolder || time.Now().After(deadline) {
			return nil
		}
		if err := sleepUntil(ctx, time.Now().Add(200*time.Millisecond)); err != nil {
			return err
		}
	}
}

// waitAnswering waits until every pair has answered every probe for a
// second, counted from since, or timeout passes.
func (r *runner) waitAnswering(ctx context.Context, p *lab.Prober, since time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !p.Answering(since, time.Second) {
		if time.Now().After(deadline) {
			return fmt.Errorf("some pairs still lose probes %v after %s", timeout, since.Format("15:04:05.000"))
		}
		if err := sleepUntil(ctx, time.Now().Add(50*time.Millisecond)); err != nil {
			return err
		}
	}
	return nil
}

// concerned computes, for each probed pair, whether the fault b concerns
// it, from the paths of the plans with the HA site's current active
// gateway.
func (r *runner) concerned(ctx context.Context, b Blast) ([]bool, error) {
	active, err := r.activeOrNil(ctx)
	if err != nil {
		return nil, err
	}
	plans, err := r.plans(active)
	if err != nil {
		return nil, err
	}
	site := func(gw string) string { return plans[gw].Site }
	out := make([]bool, len(r.pairs))
	for i, p := range r.pairs {
		path, err := Path(plans, p)
		if err != nil {
			return nil, err
		}
		out[i] = b.Concerned(p, path, site)
	}
	return out, nil
}

// logMark remembers how far the agents' logs went, to read what they
// wrote since.
type logMark struct {
	dir  string
	size map[string]int64
}

// markLogs marks the end of every agent log of the lab.
func markLogs(l *lab.Lab) *logMark {
	m := &logMark{dir: filepath.Join(l.Dir, "logs"), size: map[string]int64{}}
	for _, f := range m.files() {
		if st, err := os.Stat(f); err == nil {
			m.size[f] = st.Size()
		}
	}
	return m
}

// files lists the agents' logs: gateways' fednet processes.
func (m *logMark) files() []string {
	files, _ := filepath.Glob(filepath.Join(m.dir, "gw-*.log"))
	return files
}

// since returns what the agents wrote to their logs since the mark (logs
// of agents started since, whole).
func (m *logMark) since() string {
	var b strings.Builder
	for _, f := range m.files() {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if off := m.size[f]; off <= int64(len(data)) {
			data = data[off:]
		}
		b.Write(data)
	}
	return b.String()
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func parseSpec(text string) (*spec.Federation, error) {
	f, err := spec.Parse([]byte(text))
	if err != nil {
		return nil, errors.Join(errors.New("the changed spec"), err)
	}
	return f, nil
}
