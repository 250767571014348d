import JSON

/// Google API error bodies: `{"error": {"code": 400, "message": "...", "status": "INVALID_ARGUMENT"}}`.
public enum GoogleAPIError {
    public static func body(code: Int, status: String, message: String) -> String {
        var error = JSONObjectWriter()
        error.add("code", code)
        error.add("message", message)
        error.add("status", status)
        var body = JSONObjectWriter()
        body.add("error", error)
        return body.json
    }

    public static func message(fromBody text: String) -> String? {
        (try? JSONParser.parse(text))?["error"]?["message"]?.stringValue
    }
}
