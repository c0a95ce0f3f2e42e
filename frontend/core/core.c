/*
 * core: the definition of the frontend's one global (core.h). frontend/server.c points it at the
 * server it builds at start-up; every layer reads it from here, so none depends on the wiring.
 */
#include "core.h"

struct server *srv;
