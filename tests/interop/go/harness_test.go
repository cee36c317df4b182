package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
)

// Limits from the suite contract.
const (
	brokerStartTimeout = 10 * time.Second // the two URL lines
	brokerStopGrace    = 5 * time.Second  // SIGTERM, then SIGKILL
	operationTimeout   = 5 * time.Second
	connectionTimeout  = 2 * time.Second
)

// ---- environment ------------------------------------------------------------------------------

var (
	logDirOnce sync.Once
	logDirPath string
)

// logRoot is $INTEROP_LOG_DIR, or a temporary directory made once per test binary.
func logRoot(t testing.TB) string {
	logDirOnce.Do(func() {
		logDirPath = os.Getenv("INTEROP_LOG_DIR")
		if logDirPath == "" {
			d, err := os.MkdirTemp("", "interop-go-")
			if err == nil {
				logDirPath = d
			}
		}
	})
	if logDirPath == "" {
		t.Fatalf("no log directory: INTEROP_LOG_DIR is unset and no temporary directory could be made")
	}
	if err := os.MkdirAll(logDirPath, 0o755); err != nil {
		t.Fatalf("log directory %s: %v", logDirPath, err)
	}
	return logDirPath
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// testLogDir is the directory of one test's logs: $INTEROP_LOG_DIR/<test name>.
func testLogDir(t testing.TB) string {
	d := filepath.Join(logRoot(t), unsafeChars.ReplaceAllString(t.Name(), "_"))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatalf("log directory %s: %v", d, err)
	}
	return d
}

func brokerBin(t testing.TB) string {
	b := os.Getenv("BROKER_BIN")
	if b == "" {
		t.Fatalf("BROKER_BIN is not set: it must be the absolute path of the broker binary " +
			"(cargo build --release -p broker; BROKER_BIN=$PWD/target/release/broker)")
	}
	st, err := os.Stat(b)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("BROKER_BIN=%q is not an executable file (%v)", b, err)
	}
	return b
}

// brokerArgs is $BROKER_ARGS split on whitespace (CI sets --check-frames).
func brokerArgs() []string { return strings.Fields(os.Getenv("BROKER_ARGS")) }

// ---- the broker process -------------------------------------------------------------------------

// Broker is one broker process (and, for a restartable broker, its later generations on the same
// ports and data directory). It is stopped by t.Cleanup; an unclean stop fails the test.
type Broker struct {
	t          testing.TB
	name       string
	listen     string
	admin      string
	dataDir    string
	extra      []string
	generation int

	cmd        *exec.Cmd
	done       chan struct{}
	stderr     *os.File
	StderrPath string
	ServiceURL string
	AdminURL   string
}

// StartBroker starts a broker on OS-chosen ports with the given extra flags.
func StartBroker(t testing.TB, name string, extra ...string) *Broker {
	t.Helper()
	b := &Broker{t: t, name: name, listen: "127.0.0.1:0", admin: "127.0.0.1:0", extra: extra}
	b.start()
	t.Cleanup(b.cleanup)
	return b
}

// StartRestartableBroker starts a broker on two fixed free ports with --data-dir dataDir, so a
// later generation (Restart) is found by the clients at the same address.
func StartRestartableBroker(t testing.TB, name, dataDir string, extra ...string) *Broker {
	t.Helper()
	p1 := freePort(t)
	p2 := freePort(t)
	for p2 == p1 {
		p2 = freePort(t)
	}
	b := &Broker{
		t: t, name: name, dataDir: dataDir, extra: extra,
		listen: fmt.Sprintf("127.0.0.1:%d", p1), admin: fmt.Sprintf("127.0.0.1:%d", p2),
	}
	b.start()
	t.Cleanup(b.cleanup)
	return b
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (b *Broker) start() {
	t := b.t
	t.Helper()
	bin := brokerBin(t)
	// A port of the previous generation may still be in TIME_WAIT or held a moment: retry.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := b.startOnce(bin)
		if err == nil {
			return
		}
		if b.listen == "127.0.0.1:0" || time.Now().After(deadline) {
			t.Fatalf("broker %s: %v", b.name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *Broker) startOnce(bin string) error {
	b.generation++
	args := []string{"--listen", b.listen, "--admin", b.admin}
	if b.dataDir != "" {
		args = append(args, "--data-dir", b.dataDir)
	}
	args = append(args, b.extra...)
	args = append(args, brokerArgs()...)

	b.StderrPath = filepath.Join(testLogDir(b.t), fmt.Sprintf("%s.%d.stderr.log", b.name, b.generation))
	stderr, err := os.Create(b.StderrPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = nil
	cmd.Stderr = stderr
	// The broker dies with the test binary even if that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stderr.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		stderr.Close()
		return fmt.Errorf("exec %s: %w", bin, err)
	}
	b.cmd, b.stderr, b.done = cmd, stderr, make(chan struct{})
	lines := make(chan string, 2)
	go func() {
		r := bufio.NewReader(stdout)
		for i := 0; i < 2; i++ {
			line, err := r.ReadString('\n')
			if err != nil {
				break
			}
			lines <- strings.TrimSpace(line)
		}
		close(lines)
		_, _ = io.Copy(io.Discard, r) // keep the pipe drained; ends at exit
		_ = cmd.Wait()
		close(b.done)
	}()

	var got []string
	timer := time.NewTimer(brokerStartTimeout)
	defer timer.Stop()
	for len(got) < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				<-b.done
				b.stderr.Close()
				return fmt.Errorf("printed %d of 2 URL lines, then exited (%v); args %q; see %s",
					len(got), cmd.ProcessState, args, b.StderrPath)
			}
			got = append(got, l)
		case <-timer.C:
			_ = cmd.Process.Kill()
			<-b.done
			b.stderr.Close()
			return fmt.Errorf("printed %d of 2 URL lines within %v; see %s", len(got), brokerStartTimeout, b.StderrPath)
		}
	}
	b.ServiceURL, b.AdminURL = got[0], got[1]
	if !strings.HasPrefix(b.ServiceURL, "pulsar://127.0.0.1:") || !strings.HasPrefix(b.AdminURL, "http://127.0.0.1:") {
		b.t.Fatalf("broker %s: unexpected URL lines %q, %q", b.name, b.ServiceURL, b.AdminURL)
	}
	if b.listen != "127.0.0.1:0" && (b.ServiceURL != "pulsar://"+b.listen || b.AdminURL != "http://"+b.admin) {
		b.t.Fatalf("broker %s generation %d: URL lines %q, %q, expected its fixed ports %s and %s",
			b.name, b.generation, b.ServiceURL, b.AdminURL, b.listen, b.admin)
	}
	return nil
}

func (b *Broker) running() bool {
	if b.cmd == nil {
		return false
	}
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits up to 5 s (then SIGKILL). It returns an error for a slow or
// unclean shutdown (a non-zero exit code).
func (b *Broker) Stop() error {
	if b.cmd == nil {
		return nil
	}
	defer func() { b.cmd = nil }()
	select {
	case <-b.done:
		b.stderr.Close()
		return fmt.Errorf("broker %s (generation %d) had exited on its own: %v; see %s",
			b.name, b.generation, b.cmd.ProcessState, b.StderrPath)
	default:
	}
	t0 := time.Now()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	var problem error
	select {
	case <-b.done:
	case <-time.After(brokerStopGrace):
		_ = b.cmd.Process.Kill()
		<-b.done
		problem = fmt.Errorf("broker %s did not exit within %v of SIGTERM (killed); see %s",
			b.name, brokerStopGrace, b.StderrPath)
	}
	b.stderr.Close()
	if problem == nil && b.cmd.ProcessState.ExitCode() != 0 {
		problem = fmt.Errorf("broker %s exited with %v after SIGTERM (%.1f s); see %s",
			b.name, b.cmd.ProcessState, time.Since(t0).Seconds(), b.StderrPath)
	}
	return problem
}

// Restart stops the broker with SIGTERM (checked) and starts the next generation on the same
// ports and data directory.
func (b *Broker) Restart() {
	b.t.Helper()
	if b.listen == "127.0.0.1:0" {
		b.t.Fatalf("Restart needs a broker from StartRestartableBroker")
	}
	if err := b.Stop(); err != nil {
		b.t.Fatal(err)
	}
	b.start()
}

func (b *Broker) cleanup() {
	if err := b.Stop(); err != nil {
		b.t.Error(err)
	}
}

// ---- the client ---------------------------------------------------------------------------------

var (
	clientLogsMu sync.Mutex
	clientLogs   = map[string]*os.File{}
)

// clientLogger writes the Go client's log of one test to <test log dir>/client.log.
func clientLogger(t testing.TB) pulsarlog.Logger {
	path := filepath.Join(testLogDir(t), "client.log")
	clientLogsMu.Lock()
	defer clientLogsMu.Unlock()
	f, ok := clientLogs[path]
	if !ok {
		var err error
		f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatalf("client log %s: %v", path, err)
		}
		clientLogs[path] = f
		// Registered before any client of the test, so it runs after every client closed.
		t.Cleanup(func() {
			clientLogsMu.Lock()
			defer clientLogsMu.Unlock()
			delete(clientLogs, path)
			_ = f.Close()
		})
	}
	h := slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})
	return pulsarlog.NewLoggerWithSlog(slog.New(h))
}

// NewClient is a stock client with short timeouts, its log in the test's log directory, closed
// when the test ends (before its broker stops).
func NewClient(t testing.TB, url string) pulsar.Client {
	t.Helper()
	logger := clientLogger(t)
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               url,
		OperationTimeout:  operationTimeout,
		ConnectionTimeout: connectionTimeout,
		Logger:            logger,
	})
	if err != nil {
		t.Fatalf("pulsar.NewClient(%s): %v", url, err)
	}
	t.Cleanup(c.Close)
	return c
}

// uniqueTopic is persistent://public/default/<stem>-<pid>-<time>.
func uniqueTopic(stem string) string {
	return fmt.Sprintf("persistent://public/default/%s-%d-%d", stem, os.Getpid(), time.Now().UnixNano()%1e9)
}

// ---- bounded receiving --------------------------------------------------------------------------

// receiveWithin returns the next message, or nil when none arrives within d.
func receiveWithin(c pulsar.Consumer, d time.Duration) (pulsar.Message, error) {
	if d <= 0 {
		d = time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return nil, nil
		}
		return nil, err
	}
	return m, nil
}

// drain receives (without acking) until nothing arrives for quiet, or limit passed.
func drain(t testing.TB, c pulsar.Consumer, quiet, limit time.Duration) []pulsar.Message {
	t.Helper()
	var got []pulsar.Message
	end := time.Now().Add(limit)
	for len(got) < 100000 {
		left := time.Until(end)
		if left <= 0 {
			break
		}
		m, err := receiveWithin(c, min(quiet, left))
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if m == nil {
			break
		}
		got = append(got, m)
	}
	return got
}

// receiveN receives until n messages arrived or limit passed, then keeps receiving until nothing
// more comes for quiet (so extras and duplicates show). Nothing is acked.
func receiveN(t testing.TB, c pulsar.Consumer, n int, limit, quiet time.Duration) []pulsar.Message {
	t.Helper()
	var got []pulsar.Message
	end := time.Now().Add(limit)
	for len(got) < n && time.Now().Before(end) {
		m, err := receiveWithin(c, min(500*time.Millisecond, time.Until(end)))
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if m != nil {
			got = append(got, m)
		}
	}
	return append(got, drain(t, c, quiet, 5*time.Second)...)
}

// waitUntil polls cond every 20 ms until it holds or limit passed (then fails, naming what).
func waitUntil(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !cond() {
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
}

func payloads(ms []pulsar.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload())
	}
	return out
}

func idKey(id pulsar.MessageID) string {
	return fmt.Sprintf("%d:%d:%d", id.LedgerID(), id.EntryID(), id.BatchIdx())
}

// errList collects errors from application goroutines (t.Fatal must not be called there).
type errList struct {
	mu   sync.Mutex
	errs []error
}

func (e *errList) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, err)
}

func (e *errList) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.errs...)
}

// ---- one summary line per scenario --------------------------------------------------------------

// Scenario prints `scenario <name>: <PASS|XFAIL(feature)|FAIL> messages=<n> <seconds>s` when
// the test ends; messages counts what the scenario published (Sent).
type Scenario struct {
	name     string
	start    time.Time
	messages atomic.Int64
	xfail    string
}

var summaryMu sync.Mutex

func begin(t testing.TB, name string) *Scenario {
	s := &Scenario{name: name, start: time.Now()}
	logRoot(t)
	t.Cleanup(func() {
		result := "PASS"
		switch {
		case t.Failed():
			result = "FAIL"
		case t.Skipped():
			result = "SKIP"
		case s.xfail != "":
			result = "XFAIL(" + s.xfail + ")"
		}
		line := fmt.Sprintf("scenario %s: %s messages=%d %.1fs", s.name, result, s.messages.Load(),
			time.Since(s.start).Seconds())
		summaryMu.Lock()
		defer summaryMu.Unlock()
		fmt.Println(line)
		if f, err := os.OpenFile(filepath.Join(logDirPath, "summary.log"),
			os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	})
	return s
}

// Sent counts n published messages.
func (s *Scenario) Sent(n int) { s.messages.Add(int64(n)) }

// ---- strict expected failures -------------------------------------------------------------------

// expectFailure runs a scenario for a feature the broker does not serve yet. The scenario
// returns nil when the feature works. An error is the expected failure (XFAIL, logged with the
// error); nil fails the test: the marker must then be removed and the scenario made a normal one.
// A panic inside the client is an error too.
func expectFailure(t *testing.T, s *Scenario, feature string, scenario func(t *testing.T) error) {
	t.Helper()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		err = scenario(t)
	}()
	if t.Failed() {
		return
	}
	if err == nil {
		t.Fatalf("expected failure %q did not happen: the scenario PASSED. The broker serves %q now: "+
			"remove the expectFailure marker and make %s a normal test", feature, feature, t.Name())
	}
	s.xfail = feature
	t.Logf("XFAIL(%s): %v", feature, err)
}

// ---- scenarios that may crash the process -------------------------------------------------------

const childEnv = "INTEROP_GO_CHILD"

// isolated runs the calling test again in a child process (this test binary with
// -test.run=^Name$) and takes the child's verdict; it returns true in the child, where the test
// body runs. For scenarios where a client bug can panic in one of the client's own goroutines,
// which no recover can catch and which would end every other test with it. The child's output is
// kept in <test log dir>/child.log; its scenario line is printed here (a FAIL line named
// scenario when the child died before printing one).
func isolated(t *testing.T, scenario string) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$",
		"-test.count=1", "-test.v", "-test.timeout=80s")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name(), "INTEROP_LOG_DIR="+logRoot(t))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(testLogDir(t), "child.log"), out, 0o644)
	printed := false
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "scenario ") {
			fmt.Println(l)
			printed = true
		}
	}
	if err != nil {
		if !printed {
			fmt.Printf("scenario %s: FAIL messages=0 %.1fs\n", scenario, time.Since(start).Seconds())
		}
		tail := string(out)
		if len(tail) > 4000 {
			tail = "…" + tail[len(tail)-4000:]
		}
		t.Fatalf("the scenario's child process failed (%v); its output (all in %s):\n%s",
			err, filepath.Join(testLogDir(t), "child.log"), tail)
	}
	return false
}

// sendOne publishes one unbatched message with payload to topic and counts it in sc.
func sendOne(t *testing.T, cl pulsar.Client, sc *Scenario, topic, payload string) {
	t.Helper()
	producer, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer producer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := producer.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
		t.Fatalf("send: %v", err)
	}
	sc.Sent(1)
}
