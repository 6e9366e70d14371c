package cli

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shellWords splits one shell line into commands (at |, ||, &&, ;) and
// each command into words, honouring quotes; a # after a blank starts a
// comment. It is enough for the docs' examples, not a shell.
func shellWords(line string) [][]string {
	var cmds [][]string
	var words []string
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	end := func() {
		flush()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			cur.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '#' && !inWord:
			end()
			return cmds
		case c == ' ' || c == '\t':
			flush()
		case c == '|' || c == ';' || c == '&':
			end()
			if i+1 < len(line) && (line[i+1] == '|' || line[i+1] == '&') {
				i++
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	end()
	return cmds
}

// shCommands returns the commands of the sh code blocks of a markdown
// file, as words, without leading environment assignments.
func shCommands(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	inSh := false
	sc := bufio.NewScanner(f)
	pending := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "```sh"):
			inSh = true
			continue
		case strings.HasPrefix(line, "```"):
			inSh = false
			continue
		case !inSh:
			continue
		}
		if strings.HasSuffix(line, "\\") {
			pending += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, pending = pending+line, ""
		for _, words := range shellWords(line) {
			for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
				words = words[1:] // VAR=value
			}
			if len(words) > 0 {
				out = append(out, words)
			}
		}
	}
	return out
}

// docCommands returns the arguments of the fednet commands of the sh code
// blocks of a markdown file, without redirections.
func docCommands(t *testing.T, path string) [][]string {
	t.Helper()
	var out [][]string
	for _, words := range shCommands(t, path) {
		if words[0] != "fednet" {
			continue
		}
		args := []string{}
		for k := 1; k < len(words); k++ {
			w := words[k]
			if strings.HasPrefix(w, ">") || strings.HasPrefix(w, "<") || strings.HasPrefix(w, "2>") {
				if w == ">" || w == ">>" || w == "<" || w == "2>" {
					k++ // the file name
				}
				continue
			}
			args = append(args, w)
		}
		out = append(out, args)
	}
	return out
}

// TestDeployDocCommands checks every fednet command in docs/deploy.md and
// docs/cloud.md against the command tree: the subcommand exists, every
// flag exists, the arguments fit. Nothing is run.
func TestDeployDocCommands(t *testing.T) {
	for doc, least := range map[string]int{"deploy.md": 20, "cloud.md": 7} {
		cmds := docCommands(t, filepath.Join("..", "..", "docs", doc))
		if len(cmds) < least {
			t.Errorf("%s: found %d fednet commands, want at least %d (is the extraction broken?)", doc, len(cmds), least)
		}
		for _, args := range cmds {
			line := "fednet " + strings.Join(args, " ")
			root := NewRoot()
			cmd, rest, err := root.Find(args)
			if err != nil || cmd == root {
				t.Errorf("%s: %q: no such command (%v)", doc, line, err)
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("%s: %q: %v", doc, line, err)
				continue
			}
			if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
				t.Errorf("%s: %q: %v", doc, line, err)
			}
			if !cmd.Runnable() {
				t.Errorf("%s: %q: %s does nothing by itself", doc, line, cmd.CommandPath())
			}
		}
	}
}

// TestDeployDocOtherCommands checks what deploy.md names besides fednet:
// make targets and systemd units exist.
func TestDeployDocOtherCommands(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, words := range shCommands(t, filepath.Join("..", "..", "docs", "deploy.md")) {
		line := strings.Join(words, " ")
		switch {
		case len(words) >= 2 && words[0] == "make":
			if !strings.Contains(string(makefile), "\n"+words[1]+":") {
				t.Errorf("deploy.md: %q: no make target %s", line, words[1])
			}
		case len(words) >= 2 && words[0] == "systemctl":
			for _, w := range words[1:] {
				if strings.HasPrefix(w, "fednet-") {
					unit := strings.TrimSuffix(w, ".service") + ".service"
					if _, err := os.Stat(filepath.Join("..", "..", "packaging", "systemd", unit)); err != nil {
						t.Errorf("deploy.md: %q: no unit %s in packaging/systemd", line, unit)
					}
				}
			}
		}
	}
}

func TestShellWords(t *testing.T) {
	got := shellWords(`FEDNET_TOKEN="$(cat a b)" fednet login --manager x && fednet status | jq . # comment`)
	want := "[[FEDNET_TOKEN=$(cat a b) fednet login --manager x] [fednet status] [jq .]]"
	if g := sprint(got); g != want {
		t.Errorf("got %s, want %s", g, want)
	}
}

func sprint(cmds [][]string) string {
	var parts []string
	for _, c := range cmds {
		parts = append(parts, "["+strings.Join(c, " ")+"]")
	}
	return "[" + strings.Join(parts, " ") + "]"
}
