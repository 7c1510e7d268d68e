# Sourced by .ci/release-check and .ci/release-tidy, from the repository
# root: the published modules, the release version, and a module proxy in
# a directory holding those modules at that version, zipped from the
# checkout, as the release's tags would publish them (docs/releasing.md).

# published: the modules a release tags, the root first. unpublished: the
# other modules in go.work, never tagged (test modules of their own).
# integration/tpcc is outside go.work and unpublished too.
published=(. cmd/pgreplica pgreplicaprom pgreplicaotel pgreplicagrpc redisstore integration)
unpublished=(integration/orm pgreplicagrpc/internal/clustertest)
root_path=github.com/pgreplica/pgreplica

# The machine's own settings, read before release_env changes them.
machine_goproxy=$(go env GOPROXY)
machine_modcache=$(go env GOMODCACHE)

# module_path DIR prints the module path of the published module in DIR.
module_path() {
  if [ "$1" = . ]; then echo "$root_path"; else echo "$root_path/$1"; fi
}

# release_version prints the version of CHANGELOG.md's first "## vX.Y.Z"
# heading: the release being prepared, or the last one made.
release_version() {
  local v
  v=$(sed -n -E 's/^## (v[0-9]+\.[0-9]+\.[0-9]+)([^0-9A-Za-z.+-].*)?$/\1/p' CHANGELOG.md | head -n 1)
  if [ -z "$v" ]; then echo "CHANGELOG.md has no '## vX.Y.Z' heading" >&2; return 1; fi
  echo "$v"
}

# check_module_list fails when go.work uses a module that is neither
# published nor unpublished above: a new module must be placed.
check_module_list() {
  local dir rel known bad=0
  for dir in $(go list -m -f '{{.Dir}}'); do
    rel=${dir#"$PWD"}; rel=${rel#/}; rel=${rel:-.}
    known=0
    for m in "${published[@]}" "${unpublished[@]}"; do [ "$m" = "$rel" ] && known=1; done
    if [ $known = 0 ]; then
      echo "go.work uses $rel, which .ci/release.sh lists neither as published nor as unpublished" >&2
      bad=1
    fi
  done
  return $bad
}

# build_proxy OUT VERSION lays out a module proxy in OUT with every
# published module at VERSION (.ci/releaseproxy, which first refuses a
# replace directive or a requirement of an unpublished module or version).
build_proxy() {
  (cd .ci/releaseproxy && GOWORK=off go run . -repo ../.. -version "$2" -out "$1" "${published[@]}")
}

# release_env TMP sets the environment for go commands that fetch the
# release from the proxy in TMP/proxy as a user fetches it: no workspace,
# the release's modules first from that proxy (so never looked up in a
# checksum database: GONOSUMDB), every other module from the machine's
# module cache or its configured proxy after it. The module cache is
# TMP/modcache, so the release's modules, built from this checkout, never
# enter the machine's cache under a version the real proxy may serve
# otherwise; builds use -trimpath, so that the build cache still serves
# them from one temporary directory to the next.
release_env() {
  export GOWORK=off GOTOOLCHAIN=local
  export GOMODCACHE=$1/modcache
  export GOPROXY="file://$1/proxy,file://$machine_modcache/cache/download,$machine_goproxy"
  export GONOSUMDB=$root_path GOPRIVATE= GONOPROXY=
  export GOFLAGS="${GOFLAGS:-} -modcacherw -trimpath"
}

# known_sums prints the checksums the repository's go.sum files record,
# but none of its own modules': seeded into a new go.sum, they spare the
# checksum database every module the repository already uses.
known_sums() {
  cat go.work.sum $(git ls-files -- '*go.sum') | grep -v "^$root_path[ /]" | sort -u
}
