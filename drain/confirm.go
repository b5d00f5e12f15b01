package drain

import (
	"context"
	"io"
	"strings"
)

// maxAnswer is the longest answer read; a longer one is a refusal.
const maxAnswer = 16

// Confirm reads an answer from a terminal in raw mode, byte by byte, echoing it to echo.
// "y" or "yes" in any case, ended by Enter, proceeds. Anything else, more than 16
// characters, Ctrl-D, end of input or a non-printable byte is ErrDeclined; Ctrl-C is
// context.Canceled. The context's end (the command's deadline) ends the wait.
func Confirm(ctx context.Context, in io.Reader, echo io.Writer) error {
	type answer struct{ err error }
	done := make(chan answer, 1)
	go func() {
		var got []byte
		buf := make([]byte, 1)
		for {
			n, err := in.Read(buf)
			if n == 0 {
				if err != nil {
					done <- answer{ErrDeclined}
					return
				}
				continue
			}
			switch c := buf[0]; {
			case c == '\r' || c == '\n':
				_, _ = io.WriteString(echo, "\r\n")
				if a := strings.ToLower(string(got)); a == "y" || a == "yes" {
					done <- answer{nil}
				} else {
					done <- answer{ErrDeclined}
				}
				return
			case c == 0x03: // Ctrl-C
				_, _ = io.WriteString(echo, "\r\n")
				done <- answer{context.Canceled}
				return
			case c < 0x20 || c >= 0x7f || len(got) == maxAnswer: // Ctrl-D, other controls, non-ASCII, too long
				_, _ = io.WriteString(echo, "\r\n")
				done <- answer{ErrDeclined}
				return
			default:
				got = append(got, c)
				_, _ = echo.Write(buf[:1])
			}
		}
	}()
	select {
	case a := <-done:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
