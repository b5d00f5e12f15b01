//go:build e2e

package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/integration/standin"
)

// newE2EFixture is newFixture without the stand-in gateway: a real controller judges the
// routes. It creates the namespace and the InferenceService chat.
func newE2EFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, ns: newNamespace(t), routing: standin.Routing{Client: tmc}}
	f.isvcUID = f.createISVC(service, nil)
	return f
}

// host is the hostname the fixture's publisher routes (its HostTemplate).
func (f *fixture) host() string { return service + "." + f.ns + ".example.com" }

// stamped is one TrafficMap state a watch delivered, with when the test received it.
type stamped struct {
	at time.Time
	tm *v1beta1.TrafficMap
}

// mapWatch records every state of the fixture's map a watch delivers, with its arrival time.
type mapWatch struct {
	mu     sync.Mutex
	seen   []stamped
	more   chan struct{} // closed and replaced on every new state
	cancel context.CancelFunc
}

// watchMap starts a watch on the fixture's map from its current resourceVersion.
func (f *fixture) watchMap() *mapWatch {
	f.t.Helper()
	tm := f.getMap()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := tmc.OmeV1beta1().TrafficMaps(f.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", service).String(),
		ResourceVersion: tm.ResourceVersion,
	})
	require.NoError(f.t, err)
	mw := &mapWatch{cancel: cancel, more: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			if obj, ok := ev.Object.(*v1beta1.TrafficMap); ok {
				mw.add(stamped{at: time.Now(), tm: obj})
			}
		}
	}()
	f.t.Cleanup(func() { cancel(); <-done })
	return mw
}

func (mw *mapWatch) add(s stamped) {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	mw.seen = append(mw.seen, s)
	close(mw.more)
	mw.more = make(chan struct{})
}

// waitPublishedAt waits until the watch delivers Published True at the map's generation
// with a message containing want, and returns when it arrived: the moment a consumer
// watching the map learns that the change is published.
func (mw *mapWatch) waitPublishedAt(t *testing.T, want string) (time.Time, *v1beta1.TrafficMap) {
	t.Helper()
	deadline := time.After(2 * waitTimeout)
	for i := 0; ; {
		mw.mu.Lock()
		seen, more := mw.seen[i:], mw.more
		mw.mu.Unlock()
		for _, s := range seen {
			i++
			c := published(s.tm)
			if c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == s.tm.Generation && strings.Contains(c.Message, want) {
				return s.at, s.tm
			}
		}
		select {
		case <-more:
		case <-deadline:
			last := "none"
			if n := len(mw.seen); n > 0 {
				if c := published(mw.seen[n-1].tm); c != nil {
					last = fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
				}
			}
			require.FailNow(t, "Published True with "+want+" never came", "last Published: %s", last)
		}
	}
}

// served is one request of a load run.
type served struct {
	sent time.Time
	answer
}

// load sends requests for one host through a gateway from several workers, back to back,
// until stopped, and keeps every answer.
type load struct {
	mu      sync.Mutex
	answers []served
	errs    []error
	stop    chan struct{}
	wg      sync.WaitGroup
}

// startLoad starts workers sending requests for host to the gateway at addr.
func startLoad(c *http.Client, addr, host string, workers int) *load {
	l := &load{stop: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				sent := time.Now()
				a, err := ask(c, "http://"+addr+"/", host)
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err)
				} else {
					l.answers = append(l.answers, served{sent: sent, answer: a})
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// finish stops the load and returns its answers sorted by sending time; a transport error
// fails the test.
func (l *load) finish(t *testing.T) []served {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	require.Empty(t, l.errs, "requests through the gateway failed")
	slices.SortFunc(l.answers, func(a, b served) int { return a.sent.Compare(b.sent) })
	return l.answers
}

// e2eReport appends lines to the file $E2E_REPORT names (make e2e E2E_REPORT=file), for
// BENCHMARKS.md or the docs to quote; it always logs them.
func e2eReport(t *testing.T, lines ...string) {
	t.Helper()
	for _, l := range lines {
		t.Log(l)
	}
	path := os.Getenv("E2E_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = fmt.Fprintf(f, "%s\n", strings.Join(lines, "\n"))
	require.NoError(t, err)
}

// tally counts answers by who answered.
func tally(answers []served) map[string]int {
	out := map[string]int{}
	for _, a := range answers {
		out[a.Who]++
	}
	return out
}
