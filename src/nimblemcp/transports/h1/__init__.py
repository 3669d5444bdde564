"""nimblemcp's own HTTP/1.1 wire: the opt-in server engine and the client's connection pool (stdlib, httptools and the error tree only)."""
