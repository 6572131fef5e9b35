// The worker answers errors in the same OpenAI shape as the router, so the
// router can pass a worker's 4xx through untouched.
export function errorJson(status: number, message: string, code: string, param: string | null = null) {
  const type = status >= 500 ? "server_error" : status === 401 ? "authentication_error" : "invalid_request_error";
  return Response.json({ error: { message, type, param, code } }, { status });
}

export function errorEvent(message: string, code: string): string {
  return JSON.stringify({ error: { message, type: "server_error", param: null, code } });
}
