// Command shape checks the repository's "small types" rule: no named type has more than
// MaxMethods methods and no function or method is longer than MaxFuncLines lines (from the
// func line to its closing brace). It reads the non-test, non-generated Go files under the
// given root (default: the current directory) and skips integration/ (tests, stand-ins and
// the bench), api/client (generated), testdata and vendor directories and zz_generated files.
//
// Every violation is printed as file:line name count, sorted by file and line. The exit
// status is 1 when there is any violation, unless -warn is given (report only), and 2 on an
// error reading the sources.
//
//	go run ./hack/shape [-warn] [root]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	warn := flag.Bool("warn", false, "report violations but exit 0")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: shape [-warn] [root]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	os.Exit(run(root, *warn, os.Stdout, os.Stderr))
}

// run checks the tree at root, writes the violations to out and a summary to errOut, and
// returns the process exit status.
func run(root string, warn bool, out, errOut io.Writer) int {
	vs, err := CheckTree(root)
	if err != nil {
		fmt.Fprintf(errOut, "shape: %v\n", err)
		return 2
	}
	for _, v := range vs {
		fmt.Fprintln(out, v)
	}
	if len(vs) == 0 {
		return 0
	}
	fmt.Fprintf(errOut, "shape: %d violation(s): no type over %d methods, no function over %d lines\n",
		len(vs), MaxMethods, MaxFuncLines)
	if warn {
		return 0
	}
	return 1
}
