package lease

import (
	"github.com/trafficmap/publisher/model/replicas"

	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// held reads the report the Lease holds.
func held(t require.TestingT, kube *kubefake.Clientset, name string) replicas.Report {
	l, err := kube.CoordinationV1().Leases("ns").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	r, err := replicas.Decode(l.Annotations[replicas.Annotation])
	require.NoError(t, err)
	return r
}

// Issue 25, item 2: report A is written; the write of B lands but reports an error (a
// timeout after the API server applied it); the content goes back to A. The Lease must
// not keep B while the writer takes A for written: the Writer writes A again at once (on
// main it compared A with the last write it saw succeed, A, and left B in place until the
// next renewal), with a higher Seq than B's.
func TestWriterRewritesAfterAFailedWriteThatLanded(t *testing.T) {
	kube := kubefake.NewClientset()
	a := replicas.Report{Maps: []replicas.Map{{Key: "prod/chat", Digest: "d1", Relevant: 1}}}
	b := replicas.Report{Maps: []replicas.Map{{Key: "prod/chat", Digest: "d1", Relevant: 1, Acked: 1}}}
	var content atomic.Pointer[replicas.Report]
	content.Store(&a)
	w := &Writer{Kube: kube, Namespace: "ns", Election: "publisher", Identity: "pub-b", Duration: time.Hour,
		Build: func() replicas.Report { return *content.Load() }, FieldManager: "test", Log: zaptest.NewLogger(t)}
	name := replicas.LeaseName("publisher", "pub-b")
	require.NoError(t, w.First(context.Background()))
	first := held(t, kube, name)
	assert.Equal(t, a.Maps, first.Maps)

	var landed atomic.Bool
	kube.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if landed.Load() {
			return false, nil, nil
		}
		obj := action.(k8stesting.UpdateAction).GetObject()
		require.NoError(t, kube.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"), obj, "ns"))
		landed.Store(true)
		content.Store(&a) // back to A before the writer hears of B's fate
		return true, nil, errors.New("the request timed out")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	content.Store(&b)
	require.Eventually(t, landed.Load, 10*time.Second, time.Millisecond, "B landed")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, a.Maps, held(c, kube, name).Maps, "the Lease holds A again")
	}, 10*time.Second, 10*time.Millisecond)
	assert.Greater(t, held(t, kube, name).Seq, first.Seq+1, "above B's, which took the Seq after the first")
}

// A replica whose report is not renewed fences itself before the leader could expire the
// report (FenceAfter, two thirds of the duration), and unfences once a write lands; a
// first write that fails fences at once.
func TestWriterFencesWhileNotRenewed(t *testing.T) {
	kube := kubefake.NewClientset()
	var broken atomic.Bool
	kube.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if broken.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	var mu sync.Mutex
	var events []string
	fenced := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) > 0 && events[len(events)-1] != "unfence"
	}
	const d = 1500 * time.Millisecond
	assert.Less(t, FenceAfter(d), d, "fenced before the leader could expire the report")
	assert.Less(t, FenceAfter(15*time.Second), 15*time.Second)
	w := &Writer{Kube: kube, Namespace: "ns", Election: "publisher", Identity: "pub-b", Duration: d,
		Build: func() replicas.Report { return replicas.Report{} }, FieldManager: "test", Log: zaptest.NewLogger(t),
		Fence: func(reason string) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, reason)
		},
		Unfence: func() {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, "unfence")
		}}
	broken.Store(true)
	require.Error(t, w.First(context.Background()))
	require.True(t, fenced(), "a replica whose first report failed serves nothing")
	assert.Contains(t, events[0], "replica pub-b has not renewed its report since its start")

	broken.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { return !fenced() }, 10*time.Second, time.Millisecond, "unfenced once written")

	broken.Store(true)
	require.Eventually(t, fenced, 10*time.Second, time.Millisecond, "fenced while not renewed")
	broken.Store(false)
	require.Eventually(t, func() bool { return !fenced() }, 10*time.Second, time.Millisecond, "unfenced once renewed")
	mu.Lock()
	assert.Len(t, events, 4, "%q", events)
	mu.Unlock()
}

// The Board takes a report for the current one only when it is newer than the one it has
// of that Lease (higher Seq); a report of a Lease created anew counts whatever its Seq.
func TestBoardKeepsTheNewestReport(t *testing.T) {
	var requeued [][]string
	b := NewBoard(kubefake.NewClientset(), "ns", "publisher", "pub-a", func(keys []string) { requeued = append(requeued, keys) }, zaptest.NewLogger(t))
	lease := func(uid, rv string, r replicas.Report) *coordinationv1.Lease {
		v, err := replicas.Encode(r)
		require.NoError(t, err)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "publisher-xds-b", Namespace: "ns", UID: types.UID(uid), ResourceVersion: rv,
			Annotations: map[string]string{replicas.Annotation: v}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pub-b"), LeaseDurationSeconds: ptr.To(int32(15))}}
	}
	waiting := replicas.Report{Identity: "pub-b", Seq: 7, Maps: []replicas.Map{{Key: "prod/chat", Digest: "d1", Relevant: 1}}}
	acked := replicas.Report{Identity: "pub-b", Seq: 6, Maps: []replicas.Map{{Key: "prod/chat", Digest: "d1", Relevant: 1, Acked: 1}}}
	b.observe(lease("u1", "10", waiting))
	b.observe(lease("u1", "11", acked)) // an older report written after: not the current one
	require.Len(t, b.Peers(), 1)
	assert.Equal(t, uint64(7), b.Peers()[0].Seq)
	assert.False(t, replicas.Judge(b.Peers(), "prod/chat", "d1", false).Done)

	acked.Seq = 8
	b.observe(lease("u1", "12", acked))
	assert.Equal(t, uint64(8), b.Peers()[0].Seq)
	assert.True(t, replicas.Judge(b.Peers(), "prod/chat", "d1", false).Done)

	fresh := replicas.Report{Identity: "pub-b", Seq: 1}
	b.observe(lease("u2", "20", fresh)) // the Lease deleted and created again
	assert.Equal(t, uint64(1), b.Peers()[0].Seq)
	assert.Equal(t, [][]string{{"prod/chat"}, {"prod/chat"}, {"prod/chat"}}, requeued)
}
