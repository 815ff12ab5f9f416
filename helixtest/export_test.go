package helixtest

// NoServerMessage exposes the failure message of a test without a server.
var NoServerMessage = noServerMessage

// DefaultServer provisions (once) the test binary's default server and
// returns where it came from ("env" or "container"), for a container its
// Docker ID, and its superuser URL.
func DefaultServer() (source, containerID, url string, err error) {
	srv, err := provisionDefault()
	if err != nil {
		return "", "", "", err
	}
	return string(srv.Source), srv.ContainerID, srv.URL, nil
}
