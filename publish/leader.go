package publish

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
)

// LeaderElection makes only the holder of a Lease write routes, Services and status and
// record Events; every replica keeps its caches and serves xDS. The zero value turns it off.
type LeaderElection struct {
	// Enabled turns leader election on.
	Enabled bool
	// Namespace and Name locate the Lease (Name defaults to "trafficmap-publisher").
	Namespace, Name string
	// Identity names this replica (defaults to the hostname plus a random suffix).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod default to 15s, 10s and 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

func (l *LeaderElection) setDefaults() {
	if l.Name == "" {
		l.Name = "trafficmap-publisher"
	}
	if l.Identity == "" {
		host, _ := os.Hostname()
		l.Identity = host + "-" + rand.String(5)
	}
	if l.LeaseDuration <= 0 {
		l.LeaseDuration = 15 * time.Second
	}
	if l.RenewDeadline <= 0 {
		l.RenewDeadline = 10 * time.Second
	}
	if l.RetryPeriod <= 0 {
		l.RetryPeriod = 2 * time.Second
	}
}

// elector runs a function while this replica leads. leading is true while it does (always
// without leader election); the Event recorder reads it.
type elector struct {
	cfg     LeaderElection
	log     *zap.Logger
	config  *leaderelection.LeaderElectionConfig // nil without leader election
	leading *atomic.Bool
}

// newElector checks the settings the way client-go will, so a setting it refuses is an
// ErrInvalidConfig at start-up rather than a publisher that never leads.
func newElector(cfg LeaderElection, kube kubernetes.Interface, log *zap.Logger) (*elector, error) {
	e := &elector{cfg: cfg, log: log, leading: &atomic.Bool{}}
	if !cfg.Enabled {
		e.leading.Store(true)
		return e, nil
	}
	e.config = &leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
			Client:     kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
		},
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{ // replaced in run
			OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {},
		},
	}
	if _, err := leaderelection.NewLeaderElector(*e.config); err != nil {
		return nil, fmt.Errorf("%w: leader election: %w", ErrInvalidConfig, err)
	}
	return e, nil
}

// run calls lead until ctx is done: at once without leader election, otherwise with a
// context that ends when this replica stops leading, campaigning again after each loss.
func (e *elector) run(ctx context.Context, lead func(ctx context.Context)) error {
	if e.config == nil {
		lead(ctx)
		return nil
	}
	lease := e.cfg.Namespace + "/" + e.cfg.Name
	for ctx.Err() == nil {
		cfg := *e.config
		cfg.Callbacks = leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				e.leading.Store(true)
				e.log.Info("leading: writing routes and status", zap.String("lease", lease), zap.String("identity", e.cfg.Identity))
				lead(lctx)
			},
			OnStoppedLeading: func() {
				e.leading.Store(false)
				e.log.Info("not leading: serving xds only", zap.String("lease", lease), zap.String("identity", e.cfg.Identity))
			},
		}
		le, err := leaderelection.NewLeaderElector(cfg)
		if err != nil {
			return fmt.Errorf("%w: leader election: %w", ErrInvalidConfig, err)
		}
		le.Run(ctx)
	}
	return nil
}

// leaderRecorder records Events only while this replica leads, so replicas that do not
// write do not report either (and do not fill the namespace with duplicates).
type leaderRecorder struct {
	record.EventRecorder
	leading *atomic.Bool
}

// Event implements record.EventRecorder.
func (r *leaderRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	if r.leading.Load() {
		r.EventRecorder.Event(obj, eventType, reason, message)
	}
}

// Eventf implements record.EventRecorder.
func (r *leaderRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	if r.leading.Load() {
		r.EventRecorder.Eventf(obj, eventType, reason, format, args...)
	}
}

// AnnotatedEventf implements record.EventRecorder.
func (r *leaderRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventType, reason, format string, args ...any) {
	if r.leading.Load() {
		r.EventRecorder.AnnotatedEventf(obj, annotations, eventType, reason, format, args...)
	}
}
