package report

import "sort"

// ClusterTraffic lists the services that still send traffic to one workload cluster.
type ClusterTraffic struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Cluster    string `json:"cluster"`
	// Namespace is the namespace listed; empty for all namespaces.
	Namespace string `json:"namespace,omitempty"`
	// Services send traffic to the cluster, or may: a map whose weights cannot be computed is
	// listed with its error, since it cannot be shown to be empty.
	Services []ClusterService `json:"services"`
}

// ClusterService is one TrafficMap's entry for the cluster.
type ClusterService struct {
	Namespace  string `json:"namespace"`
	TrafficMap string `json:"trafficMap"`
	Service    string `json:"service"`
	Weight     int32  `json:"weight"`
	// Effective is nil when it cannot be computed (see Error).
	Effective *int32 `json:"effective"`
	// Published is the freshness and status of the map's Published condition, e.g. "True/Current".
	Published string `json:"published"`
	Error     string `json:"error,omitempty"`
}

// ForCluster keeps the maps whose effective weight on cluster is positive, or unknown.
func ForCluster(cluster, namespace string, statuses []Status) ClusterTraffic {
	out := ClusterTraffic{APIVersion: APIVersion, Kind: "ClusterTraffic", Cluster: cluster, Namespace: namespace, Services: []ClusterService{}}
	for _, s := range statuses {
		for _, c := range s.Clusters {
			if c.Cluster != cluster || (c.Effective != nil && *c.Effective == 0) {
				continue
			}
			out.Services = append(out.Services, ClusterService{
				Namespace: s.Namespace, TrafficMap: s.TrafficMap, Service: s.Service,
				Weight: c.Weight, Effective: c.Effective, Published: s.Published.Status + "/" + s.Published.Freshness,
				Error: s.Error,
			})
		}
	}
	sort.Slice(out.Services, func(i, j int) bool {
		a, b := out.Services[i], out.Services[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.TrafficMap < b.TrafficMap
	})
	return out
}
