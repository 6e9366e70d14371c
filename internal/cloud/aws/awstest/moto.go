// Package awstest runs moto, an AWS API emulator, in server mode for
// tests: a real HTTP endpoint that speaks the EC2 and IAM APIs, started on
// a loopback port and stopped when the test ends.
package awstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
)

// Config configures a moto server.
type Config struct {
	// NoAuthActions, when above 0, turns on moto's IAM checks after that
	// many unauthenticated calls (moto's INITIAL_NO_AUTH_ACTION_COUNT):
	// the test creates its users with those calls, and every later call
	// must be signed by a user whose policy allows it.
	NoAuthActions int
}

// Server is a running moto server.
type Server struct {
	// URL is the endpoint, http://127.0.0.1:PORT.
	URL string
}

// Region is the region the tests use.
const Region = "eu-west-1"

// Start starts moto on a free loopback port and stops it (by its PID)
// when the test ends. It skips the test when python3 is missing, and
// fails it when moto is not installed (make deps installs it).
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, stop, err := start(cfg)
	if errors.Is(err, errNoPython) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s
}

var shared struct {
	once sync.Once
	s    *Server
	stop func()
	err  error
}

// Shared returns a moto server without IAM checks that the tests of a
// package share (each makes its own VPC); StopShared, from TestMain, stops
// it. It skips or fails the test as Start does.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() { shared.s, shared.stop, shared.err = start(Config{}) })
	if errors.Is(shared.err, errNoPython) {
		t.Skip(shared.err)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.s
}

// StopShared stops the shared server, if one was started.
func StopShared() {
	if shared.stop != nil {
		shared.stop()
	}
}

var errNoPython = errors.New("python3 is not installed; the AWS tests need it to run moto (make deps installs moto; CI has python3)")

// start starts a moto server and returns a function that stops it.
func start(cfg Config) (*Server, func(), error) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, nil, errNoPython
	}
	if out, err := exec.Command(py, "-c", "import moto.server").CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("moto is not installed for %s (run make deps): %v\n%s", py, err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(py, "-m", "moto.server", "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "MOTO_CALL_RESET_API=false")
	if cfg.NoAuthActions > 0 {
		cmd.Env = append(cmd.Env, "INITIAL_NO_AUTH_ACTION_COUNT="+strconv.Itoa(cfg.NoAuthActions))
	}
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting moto: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() {
		cmd.Process.Kill()
		<-done
	}
	s := &Server{URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	deadline := time.Now().Add(60 * time.Second)
	for {
		// moto's own API: answers once the server is up, and is not
		// an action that counts against NoAuthActions.
		resp, err := http.Get(s.URL + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			return s, stop, nil
		}
		select {
		case <-done:
			return nil, nil, fmt.Errorf("moto exited before answering: %s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("moto did not answer on %s within 60 s: %v\n%s", s.URL, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for the writes of a child's output
// and a concurrent read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Credentials are an access key pair.
type Credentials struct{ AccessKeyID, SecretAccessKey string }

// Anyone are credentials moto accepts while it does not check IAM.
var Anyone = Credentials{"testing", "testing"}

// EC2 returns an EC2 client for the server.
func (s *Server) EC2(c Credentials) *ec2.Client {
	return ec2.New(ec2.Options{
		Region:       Region,
		BaseEndpoint: sdk.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, ""),
	})
}

// IAM returns an IAM client for the server.
func (s *Server) IAM(c Credentials) *iam.Client {
	return iam.New(iam.Options{
		Region:       "us-east-1",
		BaseEndpoint: sdk.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, ""),
	})
}

// UserActions is how many IAM calls User makes.
const UserActions = 3

// User creates an IAM user with an inline policy allowing actions (e.g.
// "ec2:Describe*") and returns its access key. It makes UserActions
// calls.
func (s *Server) User(ctx context.Context, t testing.TB, name string, actions ...string) Credentials {
	t.Helper()
	c := s.IAM(Anyone)
	if _, err := c.CreateUser(ctx, &iam.CreateUserInput{UserName: sdk.String(name)}); err != nil {
		t.Fatalf("iam CreateUser %s: %v", name, err)
	}
	var quoted []string
	for _, a := range actions {
		quoted = append(quoted, strconv.Quote(a))
	}
	policy := fmt.Sprintf(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":[%s],"Resource":"*"}]}`, join(quoted))
	if _, err := c.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: sdk.String(name), PolicyName: sdk.String("p"), PolicyDocument: sdk.String(policy)}); err != nil {
		t.Fatalf("iam PutUserPolicy %s: %v", name, err)
	}
	out, err := c.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: sdk.String(name)})
	if err != nil {
		t.Fatalf("iam CreateAccessKey %s: %v", name, err)
	}
	return Credentials{sdk.ToString(out.AccessKey.AccessKeyId), sdk.ToString(out.AccessKey.SecretAccessKey)}
}

func join(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x)
	}
	return b.String()
}
