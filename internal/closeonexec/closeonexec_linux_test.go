package closeonexec

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A descriptor opened without close-on-exec (as if inherited) reaches a
// child until Inherited marks it; then the child does not get it.
func TestInherited(t *testing.T) {
	fd, err := unix.Open(os.DevNull, unix.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	path := "/proc/self/fd/" + strconv.Itoa(fd)
	child := func() bool {
		out, err := exec.Command("sh", "-c", "test -e "+path+" && echo open || echo closed").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out)) == "open"
	}
	if !child() {
		t.Fatalf("fd %d did not reach the child before Inherited; the test cannot tell", fd)
	}
	Inherited()
	if child() {
		t.Errorf("fd %d still reaches the child after Inherited", fd)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd %d flags %#x, %v; want FD_CLOEXEC", fd, flags, err)
	}
	for i := 0; i <= 2; i++ {
		if flags, _ := unix.FcntlInt(uintptr(i), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
			t.Errorf("standard fd %d was marked close-on-exec", i)
		}
	}
}
