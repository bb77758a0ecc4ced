/* A C program using an installed wsync the way its users do: <wsync/wsync.h> and libwsync only.
 * It needs no MPI job: it checks the loaded library's version against WSYNC_EXPECTED_VERSION (the
 * "x.y.z" it was built for), the status strings, and calls that must fail on bad arguments with
 * the named error. Exit status 0 when every check passed. Built with -Wall -Wextra -Werror, it also
 * checks that the header compiles as C11 and that WSYNC_CONFIG_INITIALIZER lists every field. */
#include <stdio.h>
#include <string.h>
#include <wsync/wsync.h>

static int failures = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "consumer.c:%d: check failed: %s\n", __LINE__, #cond); \
      ++failures;                                                            \
    }                                                                        \
  } while (0)

/* Whether wsync_last_error(NULL) (the last failed create) mentions `needle`. */
static int createErrorMentions(const char* needle) {
  const char* error = wsync_last_error(NULL);
  if (strstr(error, needle) != NULL) return 1;
  fprintf(stderr, "consumer: \"%s\" does not mention %s\n", error, needle);
  return 0;
}

int main(void) {
  int major = -1, minor = -1, patch = -1;
  char version[64];
  CHECK(wsync_get_version(&major, &minor, &patch) == WSYNC_SUCCESS);
  snprintf(version, sizeof version, "%d.%d.%d", major, minor, patch);
  CHECK(strcmp(version, WSYNC_EXPECTED_VERSION) == 0);
  CHECK(strcmp(wsync_status_string(WSYNC_ERR_INVALID_ARGUMENT), "WSYNC_ERR_INVALID_ARGUMENT") == 0);

  wsync_context_t ctx = NULL;
  CHECK(wsync_context_create(NULL, &ctx) == WSYNC_ERR_INVALID_ARGUMENT);
  CHECK(ctx == NULL && createErrorMentions("NULL"));

  wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
  CHECK(cfg.size == sizeof(wsync_config_t) && cfg.magic == WSYNC_CONFIG_MAGIC);
  cfg.device_transport = (wsync_device_transport_t)42;
  CHECK(wsync_context_create(&cfg, &ctx) == WSYNC_ERR_INVALID_ARGUMENT);
  CHECK(ctx == NULL && createErrorMentions("device_transport"));

  cfg = (wsync_config_t)WSYNC_CONFIG_INITIALIZER;
  cfg.role = WSYNC_ROLE_ROLLOUT; /* and no replica */
  CHECK(wsync_context_create(&cfg, &ctx) == WSYNC_ERR_INVALID_ARGUMENT);
  CHECK(ctx == NULL && createErrorMentions("replica"));

  CHECK(wsync_request_wait(NULL, 0) == WSYNC_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(wsync_request_error(NULL), "") == 0);
  CHECK(wsync_context_destroy(NULL) == WSYNC_SUCCESS);

  printf("consumer: libwsync %s: %s\n", version, failures == 0 ? "all checks passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
