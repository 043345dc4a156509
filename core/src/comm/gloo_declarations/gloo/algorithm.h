// One of the gloo headers c10d includes; all it needs is in gloo/declarations.h.
#pragma once
#include <gloo/declarations.h>
