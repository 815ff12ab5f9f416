// Package integration holds the end-to-end tests of helix-dbos: they run
// against a PostgreSQL container started with testcontainers, as users run
// them, and cover what unit tests cannot: several processes, crashes and
// database outages.
//
// The image is HELIX_TEST_PG_IMAGE (default postgres:16-alpine). On machines
// without a Docker engine or registry, scripts/test.sh installs Debian's
// engine and builds an equivalent image from Debian packages first. Without a
// reachable engine the tests fail; set HELIX_INTEGRATION_SKIP=1 to skip them
// deliberately.
package integration
