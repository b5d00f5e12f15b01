package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Condition types set on a TrafficMap. The routing controller owns Routable,
// OverrideActive and CapacityFallback; a publisher owns Published and
// PublicationFallback.
const (
	// ConditionPublished is True while a publisher has realized the map's
	// current table externally. It always agrees with status.published.
	ConditionPublished = "Published"

	// ConditionRoutable is True when some entry has a positive weight; when
	// False its reason says why nothing is routable.
	ConditionRoutable = "Routable"

	// ConditionOverrideActive is True when at least one ome.io/traffic-drain
	// override has forced an entry's weight to zero.
	ConditionOverrideActive = "OverrideActive"

	// ConditionCapacityFallback is True (abnormal) when endpoint-reported
	// capacity was wanted but unavailable, so control-plane capacity was used.
	ConditionCapacityFallback = "CapacityFallback"

	// ConditionPublicationFallback is True while a publisher replays its last
	// positive plan instead of the current all-zero one.
	ConditionPublicationFallback = "PublicationFallback"
)

// AnnotationGlobalHost, set on an InferenceService, overrides the global
// hostname a publisher would otherwise render from its template. The value is
// trimmed; empty means "not set".
const AnnotationGlobalHost = "ome.io/global-host"

// RoutingFieldManager is the server-side-apply field manager of OME's routing
// controller, which owns status.sourceUID and the routing conditions. A
// publisher must never apply status under this name.
const RoutingFieldManager = "ome-trafficmap-routing"

// Bounds of status.publisher, mirrored in the CRD schema markers below.
const (
	// MaxTrafficMapPublisherNameLength is the longest allowed
	// status.publisher.publisherName, in bytes.
	MaxTrafficMapPublisherNameLength = 128

	// MaxTrafficMapPublisherTargets is the most targets that
	// status.publisher.claimedTargets and lastPositive.targets may hold.
	MaxTrafficMapPublisherTargets = 128

	// MaxTrafficMapPublisherTargetLength is the longest allowed target
	// string, in bytes.
	MaxTrafficMapPublisherTargetLength = 512
)

// PlacementMode mirrors an InferenceService's spec.placement.mode: how its
// traffic is spread over the clusters it is placed on.
// +kubebuilder:validation:Enum=Single;All;Split;SplitByCapacity
type PlacementMode string

// The placement modes OME defines.
const (
	// PlacementModeSingle serves from one home cluster.
	PlacementModeSingle PlacementMode = "Single"
	// PlacementModeAll serves from every placed cluster.
	PlacementModeAll PlacementMode = "All"
	// PlacementModeSplit splits traffic over the placed clusters.
	PlacementModeSplit PlacementMode = "Split"
	// PlacementModeSplitByCapacity splits traffic in proportion to capacity.
	PlacementModeSplitByCapacity PlacementMode = "SplitByCapacity"
)

// CapacitySource says where an entry's effective allocation came from.
// +kubebuilder:validation:Enum=ControlPlane;Endpoint
type CapacitySource string

const (
	// CapacitySourceControlPlane means the allocation is the control plane's
	// admitted count.
	CapacitySourceControlPlane CapacitySource = "ControlPlane"
	// CapacitySourceEndpoint means an endpoint report lowered the allocation.
	CapacitySourceEndpoint CapacitySource = "Endpoint"
)

// ProbeResult is the outcome of the latest reachability probe of a home.
// +kubebuilder:validation:Enum=Passing;Failing;Unknown
type ProbeResult string

const (
	// ProbeResultPassing means the home answered the probe.
	ProbeResultPassing ProbeResult = "Passing"
	// ProbeResultFailing means the probe failed conclusively.
	ProbeResultFailing ProbeResult = "Failing"
	// ProbeResultUnknown means no conclusive result yet.
	ProbeResultUnknown ProbeResult = "Unknown"
)

// TrafficMap is OME's per-InferenceService routing table: one weighted entry
// per home cluster. It has the name and namespace of its InferenceService and
// is controller-owned by it; only OME's routing controller writes spec.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName={tm,tmap}
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Published",type=string,JSONPath=`.status.conditions[?(@.type=="Published")].status`
// +kubebuilder:printcolumn:name="Routable",type=string,JSONPath=`.status.conditions[?(@.type=="Routable")].status`
// +kubebuilder:printcolumn:name="Override",type=string,JSONPath=`.status.conditions[?(@.type=="OverrideActive")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Routable")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TrafficMap struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the routing table, written only by OME's routing controller.
	// +optional
	Spec TrafficMapSpec `json:"spec,omitempty"`

	// Status is shared by the routing controller and the publisher; each
	// applies only the fields it owns.
	// +optional
	Status TrafficMapStatus `json:"status,omitempty"`
}

// TrafficMapList is a list of TrafficMaps.
//
// +kubebuilder:object:root=true
type TrafficMapList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the TrafficMaps.
	Items []TrafficMap `json:"items"`
}

// TrafficMapSpec is the routing table of one InferenceService.
type TrafficMapSpec struct {
	// Service is the InferenceService name; in v1beta1 it equals the map's
	// metadata.name.
	// +required
	Service string `json:"service"`

	// Mode mirrors the InferenceService's spec.placement.mode.
	// +optional
	Mode PlacementMode `json:"mode,omitempty"`

	// Entries holds one entry per home cluster, sorted by cluster. Empty
	// means nothing is routable; the Routable condition says why.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	Entries []TrafficMapEntry `json:"entries,omitempty"`

	// ObservedISVCGeneration is the InferenceService metadata.generation the
	// table was built from.
	// +optional
	ObservedISVCGeneration int64 `json:"observedISVCGeneration,omitempty"`
}

// TrafficMapEntry is one home cluster's row in the routing table.
type TrafficMapEntry struct {
	// Cluster is the WorkloadCluster name; it keys the entries list.
	// +required
	Cluster string `json:"cluster"`

	// Endpoint is the home's endpoint URL, copied from the
	// InferenceService's status.placement.candidates[].endpoint.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// Weight is the final weight of this home, to be applied verbatim. Zero
	// is meaningful (no traffic), so it is always serialized.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	Weight int32 `json:"weight"`

	// Healthy is true when the home has a ready replica and its probe does
	// not gate it. It ignores capacity and drains.
	// +optional
	Healthy bool `json:"healthy,omitempty"`

	// Capacity is the capacity the weight was computed from.
	// +optional
	Capacity *TrafficMapCapacity `json:"capacity,omitempty"`

	// Probe is the latest reachability probe of the home.
	// +optional
	Probe *TrafficMapProbe `json:"probe,omitempty"`

	// DrainRefs are the ome.io/traffic-drain IDs that force this entry's
	// weight to zero.
	// +optional
	// +listType=set
	DrainRefs []string `json:"drainRefs,omitempty"`
}

// TrafficMapCapacity is the capacity of one home as the routing controller
// saw it.
type TrafficMapCapacity struct {
	// Allocated is the effective allocation: min(admitted, reported) when a
	// non-negative report exists, else the admitted count.
	// +optional
	Allocated int32 `json:"allocated,omitempty"`

	// Ready is the number of ready replicas.
	// +optional
	Ready int32 `json:"ready,omitempty"`

	// Factor scales the allocation into a weight. It deliberately has no
	// schema default, so that defaulting never churns stored objects.
	// +optional
	Factor *resource.Quantity `json:"factor,omitempty"`

	// Source says where Allocated came from; it is Endpoint only when a
	// report actually lowered the allocation.
	// +optional
	// +kubebuilder:default=ControlPlane
	Source CapacitySource `json:"source,omitempty"`

	// Reported is the capacity the endpoint reported, if any.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Reported *int32 `json:"reported,omitempty"`

	// FallbackReason says why an endpoint report was not used, if one was
	// wanted.
	// +optional
	FallbackReason string `json:"fallbackReason,omitempty"`
}

// TrafficMapProbe is the latest reachability probe of one home.
type TrafficMapProbe struct {
	// PolicyDigest identifies the probe policy the result was obtained under.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	PolicyDigest string `json:"policyDigest,omitempty"`

	// Result is the probe outcome.
	// +optional
	Result ProbeResult `json:"result,omitempty"`

	// Gated is true when the probe result keeps the home out of rotation.
	// +optional
	Gated bool `json:"gated,omitempty"`

	// LastProbeTime is when the home was last probed.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`

	// ConsecutiveFailures counts failed probes since the last success.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`

	// Message is a human-readable detail of the last probe.
	// +optional
	Message string `json:"message,omitempty"`
}

// TrafficMapStatus is written by two owners through server-side apply: the
// routing controller (sourceUID and the Routable, OverrideActive and
// CapacityFallback conditions) and a publisher (everything else).
type TrafficMapStatus struct {
	// SourceUID is the UID of the owning InferenceService, written by the
	// routing controller before any publisher acts. A publisher must not plan
	// until it is set and equals the owner's UID.
	// +optional
	SourceUID types.UID `json:"sourceUID,omitempty"`

	// Published is true while the Published condition is True; the two
	// always move together.
	// +optional
	Published bool `json:"published,omitempty"`

	// GatewayRef is the object the publisher realized the map as, for
	// example an HTTPRoute.
	// +optional
	GatewayRef *TrafficMapGatewayRef `json:"gatewayRef,omitempty"`

	// ObservedTrafficMapGeneration is the map generation the publisher last
	// realized.
	// +optional
	ObservedTrafficMapGeneration int64 `json:"observedTrafficMapGeneration,omitempty"`

	// Publisher is the publisher's claim journal. It has no default.
	// +optional
	Publisher *TrafficMapPublisherStatus `json:"publisher,omitempty"`

	// Conditions are the map's conditions, keyed by type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// TrafficMapGatewayRef points at the object a publisher realized the map as.
type TrafficMapGatewayRef struct {
	// Group is the API group of the object; empty means the core group.
	// +optional
	Group string `json:"group,omitempty"`

	// Kind is the kind of the object.
	// +required
	Kind string `json:"kind"`

	// Name is the name of the object.
	// +required
	Name string `json:"name"`

	// Namespace is the namespace of the object; empty means the map's own
	// namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// TrafficMapPublisherStatus is the publisher's claim journal: which publisher
// owns the map's external state and which targets it has claimed, so a
// restarted or replaced publisher can clean up after it.
type TrafficMapPublisherStatus struct {
	// PublisherName names the publisher that owns the external state.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	PublisherName string `json:"publisherName"`

	// ClaimedTargets are the external targets the publisher has claimed. It
	// is omitted, never empty, when nothing is claimed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	ClaimedTargets []string `json:"claimedTargets,omitempty"`

	// ObservedOptionsDigest is the digest of the publisher options last
	// reconciled; absent before the first successful reconcile.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	ObservedOptionsDigest string `json:"observedOptionsDigest,omitempty"`

	// LastPositive is the last fully applied plan with a positive weight,
	// kept so it can be replayed instead of an all-zero table.
	// +optional
	LastPositive *TrafficMapPublisherLastPositive `json:"lastPositive,omitempty"`
}

// TrafficMapPublisherLastPositive records the last fully applied positive
// publication plan.
type TrafficMapPublisherLastPositive struct {
	// TrafficMapGeneration is the map generation the plan was built from.
	// +required
	// +kubebuilder:validation:Minimum=1
	TrafficMapGeneration int64 `json:"trafficMapGeneration"`

	// ObservedISVCGeneration is the InferenceService generation the plan's
	// table was built from.
	// +required
	// +kubebuilder:validation:Minimum=1
	ObservedISVCGeneration int64 `json:"observedISVCGeneration"`

	// PlanCompatibilityDigest identifies the plan shape; a retained plan is
	// replayed only while the digest still matches.
	// +required
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	PlanCompatibilityDigest string `json:"planCompatibilityDigest"`

	// Targets are the weighted targets of the plan, keyed by target.
	// +required
	// +listType=map
	// +listMapKey=target
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=128
	Targets []TrafficMapPublisherTarget `json:"targets"`
}

// TrafficMapPublisherTarget is one weighted target of a retained plan.
type TrafficMapPublisherTarget struct {
	// Target names the external target.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Target string `json:"target"`

	// Weight is the target's weight. It deliberately has no maximum.
	// +required
	// +kubebuilder:validation:Minimum=0
	Weight int64 `json:"weight"`
}
