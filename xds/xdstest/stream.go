package xdstest

import "time"

// Stream reads recv (a stream's Recv) in one goroutine, so that a receive that timed out
// loses nothing. The channel closes when recv fails.
func Stream[T any](recv func() (T, error)) <-chan T {
	ch := make(chan T, 16)
	go func() {
		defer close(ch)
		for {
			r, err := recv()
			if err != nil {
				return
			}
			ch <- r
		}
	}()
	return ch
}

// Next returns the stream's next message, or false when none arrives within wait.
func Next[T any](ch <-chan T, wait time.Duration) (T, bool) {
	select {
	case r, ok := <-ch:
		return r, ok
	case <-time.After(wait):
		var zero T
		return zero, false
	}
}
