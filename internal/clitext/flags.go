package clitext

import "flag"

// ParseFlags parses args with fs, allowing flags after the positional
// arguments too (the flag package stops at the first one): "status DSN
// -json" works like "status -json DSN". It returns the positional
// arguments, or an error already reported by fs (flag.ErrHelp for -h).
func ParseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
