# CAPCT's manager image: the static binary that `make build` (or
# `make docker-build`, hack/quickstart.mk) writes to bin/manager, on scratch.
# Nothing is pulled: scratch is built into Docker, and the binary is built on
# the host with CGO_ENABLED=0, so the image needs no libc, shell or CA bundle
# (the manager talks to the API server with the pod's service-account CA and
# to Docker over the mounted unix socket).
#
# It runs as root: the Docker socket mounted from the host
# (/var/run/docker.sock, config/manager/manager.yaml) is owned by root:docker
# and the manager must open it, so a non-root user such as 65532 cannot work.
#
#   CGO_ENABLED=0 go build -o bin/manager .
#   tar -c Dockerfile bin/manager | docker build -t docker.io/capct/manager:<version> -
#
# (the tar context keeps the repository's out/ and caches out of the build).
FROM scratch
COPY bin/manager /manager
USER 0:0
ENTRYPOINT ["/manager"]
