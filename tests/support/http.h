// A minimal HTTP/1.0 GET on loopback, for tests that read /metrics and Prometheus' API.
#pragma once

#include <string>

namespace ddpd::testing {

struct HttpReply {
  int status = 0;  // 0: no connection
  std::string body;
};

// GET http://127.0.0.1:port/path_and_query (the caller URL-encodes the query).
HttpReply http_get(int port, const std::string& path_and_query);

// Percent-encodes a query parameter's value.
std::string url_encode(const std::string& value);

}  // namespace ddpd::testing
