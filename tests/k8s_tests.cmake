# The container image and the Kubernetes manifests (docs/deploy.md): tests/k8s/.
# Each test exits 77 (reported as skipped, with the reason) when a tool it
# needs is missing: kubectl (kustomize), node with the npm packages that
# scripts/fetch_k8s_schemas.sh installs into .cache/k8s-tools, buildah.
set(PDSERVE_K8S_TESTS ${CMAKE_CURRENT_SOURCE_DIR}/k8s)

# Manifests and Dockerfiles, no processes served: unit.
#   kustomize      every overlay, component and job renders
#   schema         every object against the OpenAPI schemas, no unknown
#                  fields, pdserve's own rules (validate.mjs)
#   manifest_args  the manifests' command lines and PDSERVE_* settings parse in
#                  the real binaries
#   dockerfile     lint, setup.sh packages, runtime libraries, .dockerignore
foreach(t kustomize schema manifest_args dockerfile)
  add_test(NAME k8s_${t}_test
           COMMAND bash ${PDSERVE_K8S_TESTS}/${t}_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(k8s_${t}_test PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()

# The router finds the workers by the manifests' DNS names (real processes
# in a private network namespace): e2e.
add_test(NAME k8s_dns_discovery_test
         COMMAND bash ${PDSERVE_K8S_TESTS}/dns_discovery_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(k8s_dns_discovery_test PROPERTIES LABELS e2e TIMEOUT 600 SKIP_RETURN_CODE 77)

# The CPU image built with buildah and run: ~15 minutes cold. Label image,
# so `ctest -LE image` leaves it out. The one test that runs beside the
# others under `ctest -j2` (scripts/test.sh; tests/CMakeLists.txt gives every
# other test the lock "cores"): COST starts it first, and it runs at nice 15,
# so its package downloads and its compile take the cycles the serial tests
# leave idle. RUN_SERIAL tests (the sanitizer and fuzz trees, chaos) wait for
# it to end, so its storage and theirs never share the disk.
add_test(NAME k8s_image_build_test
         COMMAND bash ${PDSERVE_K8S_TESTS}/image_build_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(k8s_image_build_test PROPERTIES LABELS image TIMEOUT 3600 SKIP_RETURN_CODE 77 COST 100000)
