# The HAProxy pods' init container: fills /etc/haproxy (an emptyDir the haproxy and Data
# Plane API containers share) from the chart's ConfigMap, mounted at /etc/haptor-haproxy:
# the placeholder haproxy.cfg; reload.sh, the Data Plane API's reload command; and
# dataplaneapi.yaml with ${POD_NAME}, ${DATAPLANE_PORT} and ${HAPROXY_BIN} replaced by this
# container's environment (tests/support/dataplaneapi.rs does the same for the tests' pods).
# Then the API's storage directories, and its userlist from the credentials Secret
# (DATAPLANE_USERNAME, DATAPLANE_PASSWORD).

set -eu

cp /etc/haptor-haproxy/haproxy.cfg /etc/haptor-haproxy/reload.sh /etc/haproxy/
sed -e "s|\${POD_NAME}|$POD_NAME|g" \
  -e "s|\${DATAPLANE_PORT}|$DATAPLANE_PORT|g" \
  -e "s|\${HAPROXY_BIN}|$HAPROXY_BIN|g" \
  /etc/haptor-haproxy/dataplaneapi.yaml >/etc/haproxy/dataplaneapi.yaml
for d in maps ssl general dataplane spoe transactions backups; do mkdir -p "/etc/haproxy/$d"; done
printf 'userlist controller\n  user %s insecure-password %s\n' "$DATAPLANE_USERNAME" "$DATAPLANE_PASSWORD" >/etc/haproxy/userlist.cfg
chmod 600 /etc/haproxy/userlist.cfg
