package resolve

import "time"

const (
	defaultInterval = 30 * time.Second
	defaultMinTTL   = 5 * time.Second
	defaultMaxTTL   = 5 * time.Minute
	defaultTimeout  = 5 * time.Second
	defaultWorkers  = 8
)

// withDefaults fills the zero fields of cfg and clamps Interval to MinTTL..MaxTTL
// (a MaxTTL below MinTTL is raised to it).
func withDefaults(cfg Config) Config {
	if cfg.MinTTL <= 0 {
		cfg.MinTTL = defaultMinTTL
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = defaultMaxTTL
	}
	cfg.MaxTTL = max(cfg.MaxTTL, cfg.MinTTL)
	if cfg.Interval <= 0 {
		cfg.Interval = defaultInterval
	}
	cfg.Interval = clamp(cfg.Interval, cfg.MinTTL, cfg.MaxTTL)
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.Workers <= 0 {
		cfg.Workers = defaultWorkers
	}
	if cfg.Lookup == nil {
		cfg.Lookup = DNSLookup
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

func clamp(d, lo, hi time.Duration) time.Duration {
	return min(max(d, lo), hi)
}

// refreshAfter is how long after a successful lookup a host is due again: the
// TTL clamped to MinTTL..MaxTTL, or Interval when the lookup gave no TTL (0).
// cfg has its defaults.
func refreshAfter(cfg Config, ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return cfg.Interval
	}
	return clamp(ttl, cfg.MinTTL, cfg.MaxTTL)
}

// retryAfter is how long after the fails-th consecutive failure (1 for the
// first) a host is due again: MinTTL, doubling, up to Interval. cfg has its
// defaults.
func retryAfter(cfg Config, fails int) time.Duration {
	d := cfg.MinTTL
	for i := 1; i < fails && d < cfg.Interval; i++ {
		d *= 2
	}
	return min(d, cfg.Interval)
}
