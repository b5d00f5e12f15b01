package publish

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaderElection makes only the holder of a Lease write routes, Services and status; every
// replica keeps its caches and serves xDS. The zero value turns it off.
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

// runWorkers runs the reconcile workers until ctx is done: at once without leader
// election, otherwise while this replica holds the Lease, campaigning again after losing it.
func (p *Publisher) runWorkers(ctx context.Context) error {
	if !p.cfg.LeaderElection.Enabled {
		p.workers(ctx)
		return nil
	}
	le := p.cfg.LeaderElection
	lock := loggedLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     p.clients.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}, log: p.log}
	for ctx.Err() == nil {
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            le.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					p.log.Info("leading: writing routes and status", zap.String("lease", le.Namespace+"/"+le.Name), zap.String("identity", le.Identity))
					p.enqueueAll() // the previous leader may have left work undone
					p.workers(lctx)
				},
				OnStoppedLeading: func() {
					p.log.Info("not leading: serving xds only", zap.String("lease", le.Namespace+"/"+le.Name), zap.String("identity", le.Identity))
				},
			},
		})
		if err != nil {
			return fmt.Errorf("%w: leader election: %w", ErrInvalidConfig, err)
		}
		elector.Run(ctx)
	}
	return nil
}

// workers runs cfg.Workers reconcile workers until ctx is done.
func (p *Publisher) workers(ctx context.Context) {
	var wg sync.WaitGroup
	for range p.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, p.runWorker, time.Second)
		}()
	}
	wg.Wait()
}

// enqueueAll queues every cached TrafficMap.
func (p *Publisher) enqueueAll() {
	for _, inf := range p.maps {
		for _, key := range inf.GetStore().ListKeys() {
			ns, name, _ := strings.Cut(key, "/")
			p.enqueue(ns, name)
		}
	}
}

// loggedLock reports a permission error on the Lease through the publisher's logger
// (client-go's leader election logs only to klog).
type loggedLock struct {
	resourcelock.Interface
	log *zap.Logger
}

// Get implements resourcelock.Interface.
func (l loggedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, b, err := l.Interface.Get(ctx)
	l.check("get", err)
	return r, b, err
}

// Create implements resourcelock.Interface.
func (l loggedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, ler)
	l.check("create", err)
	return err
}

// Update implements resourcelock.Interface.
func (l loggedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, ler)
	l.check("update", err)
	return err
}

func (l loggedLock) check(verb string, err error) {
	if apierrors.IsForbidden(err) {
		l.log.Error("permission denied: cannot "+verb+" leases.coordination.k8s.io "+l.Describe()+"; check the publisher's RBAC",
			zap.String("resource", "leases"), zap.Error(err))
	}
}
