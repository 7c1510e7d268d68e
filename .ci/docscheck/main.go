// Command docscheck keeps the mechanical parts of pgreplica's docs true:
// every pgreplica_* DSN key and Config field in the settings table of
// docs/operations.md exactly once, and nothing there that does not
// exist; every removed key (dsn.go's removedOptions) in its "Removed
// settings" section and nowhere else in the pages; every Stats field and exported error named in the docs; every
// metric name and label value the metrics packages emit in their package
// documentation; every pgreplica_* word, Config.X and Stats.X of the
// pages real; every relative link of README.md and docs/*.md resolving,
// anchors included; README naming CI's test command.
//
// It reads the code with go/parser (no build, no dependency): the keys
// are the string literals of the driver's code that are whole
// pgreplica_* words (the table in dsn.go), the fields those of the
// structs. .ci/docs-check runs it:
//
//	cd .ci/docscheck && GOWORK=off go run . -root ../..
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	root := flag.String("root", "../..", "the repository's root")
	flag.Parse()
	problems := check(defaultConfig(*root))
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "docscheck: %d problem(s)\n", len(problems))
		os.Exit(1)
	}
	fmt.Println("docscheck: keys, fields, counters, errors, labels and links documented")
}
