package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// driverModule is the module of the driver the command links.
const driverModule = "github.com/pgreplica/pgreplica"

// runVersion prints the command's module version, the driver's it was
// built with and the Go toolchain: "pgreplica v0.1.0 (driver v0.1.0,
// go1.26.0)". A build from a checkout says (devel) for both.
func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			fmt.Fprintln(stderr, "Usage: pgreplica version\n\nPrints the version of the command, of the driver module it links and of Go.")
			return exitOK
		}
		fmt.Fprintln(stderr, "pgreplica version: no arguments expected")
		return exitUsage
	}
	fmt.Fprintln(stdout, versionLine())
	return exitOK
}

// versionLine reads the versions from the build information go install
// records in the binary.
func versionLine() string {
	cmd, driver := "(devel)", "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			cmd = bi.Main.Version
		}
		for _, m := range bi.Deps {
			if m.Path == driverModule {
				driver = m.Version
				if m.Replace != nil {
					driver = m.Replace.Version
					if driver == "" {
						driver = "(devel)" // replaced by a directory: a workspace
					}
				}
			}
		}
	}
	return fmt.Sprintf("pgreplica %s (driver %s, %s)", cmd, driver, runtime.Version())
}
