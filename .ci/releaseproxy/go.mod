module releaseproxy

go 1.26.0

require golang.org/x/mod v0.42.0
