# A release image of peergate. The build stage runs the script CI runs (.ci/run: it installs
# what the tests need and runs the README's test command), so an image is never built from a
# tree whose tests fail; then it builds the release binary. The image holds that binary, the
# default policy and CA certificates, and runs as a user of its own.
#
#   docker build -t peergate .
#   docker run -d --name peergate -p 8080:8080 -v peergate-data:/var/lib/peergate \
#     -v ./policy.toml:/etc/peergate/policy.toml:ro peergate
#   docker exec peergate peergate peer add alice --data /var/lib/peergate
#
# Set server.public_base_url in the policy you mount (the card must advertise the address
# clients use, not the container's). The admin API listens on the container's loopback only:
# reach it with `docker exec`, or run the command line there as above. It serves on a read-only
# root file system too (`docker run --read-only …`), its data being in the volume.
#
# The stages, in this order: `runtime` is the whole image but its binary, `build` compiles the
# binary, and the last stage is `runtime` with the binary copied in. The runtime stage comes
# first, and needs nothing from the build stage, so that `docker build --target runtime` builds
# it alone, even with the classic builder (which builds every stage before its target): the
# suite's container test (tests/suite/container.rs) builds this stage as it is and runs it with
# the binary under test mounted where the last stage puts the release one.

FROM debian:bookworm-slim AS runtime
# Installs the CA certificates unless the base already has them: debian:bookworm-slim never
# does, while the test's base, made from Debian's packages with no registry or package index to
# reach, is built with them.
RUN if [ ! -e /etc/ssl/certs/ca-certificates.crt ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends ca-certificates \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && useradd --system --home-dir /var/lib/peergate --create-home --shell /usr/sbin/nologin peergate \
 && chmod 0700 /var/lib/peergate
COPY policies/default.toml /etc/peergate/policy.toml
USER peergate
VOLUME /var/lib/peergate
EXPOSE 8080
# The door listens on every address in the container, so the card cannot guess the URL partners
# reach: give it, e.g. `docker run -e PEERGATE_PUBLIC_BASE_URL=https://agents.example.com …`
# (start-up refuses without it, naming the setting).
# Healthy while /ready answers 200 (ready, or degraded without Redis or the agent); no curl in
# the image: bash's /dev/tcp speaks the one request.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /ready HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/local/bin/peergate"]
CMD ["serve", "--policy", "/etc/peergate/policy.toml", "--data", "/var/lib/peergate", "--listen", "0.0.0.0:8080"]

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN .ci/run
RUN cargo build --release --locked --bin peergate

# The image: the runtime stage (its user, volume, health check and command carry over) and the
# release binary, owned by root so that the user it runs as cannot change it.
FROM runtime
COPY --from=build /src/target/release/peergate /usr/local/bin/peergate
