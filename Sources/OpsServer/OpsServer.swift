import JSON
import Prometheus
import ServiceLifecycle

/// The tiny HTTP endpoint operators scrape and probe: `GET /metrics` (Prometheus
/// text), `GET /healthz` (liveness), `GET /readyz` (readiness with named checks).
/// Anything else is 404. It never exposes tokens, keys or event payloads: it only
/// renders the registry's metrics and the checks' names and one-line details. It has a plain
/// HTTP/1.1 server of its own (`OpsHTTPServer`).
public final class OpsServer: Service, Sendable {
    public struct Check: Sendable {
        public let name: String
        public let ok: Bool
        public let detail: String

        public init(name: String, ok: Bool, detail: String) {
            self.name = name
            self.ok = ok
            self.detail = detail
        }
    }

    public typealias Checks = @Sendable () -> [Check]

    private let server: OpsHTTPServer

    /// Binds at once, so that a port in use stops startup instead of failing later.
    /// - Parameters:
    ///   - help: `# HELP` text per metric name (swift-metrics carries none).
    ///   - beforeScrape: brings gauges read from the service's state up to date, so that a
    ///     scrape shows them as of the scrape.
    public init(host: String, port: Int, registry: PrometheusCollectorRegistry, help: [String: String] = [:],
                beforeScrape: @escaping @Sendable () async -> Void = {},
                liveness: @escaping Checks, readiness: @escaping Checks) async throws {
        server = try await OpsHTTPServer.start(host: host, port: port) { method, path in
            if path == "/metrics", method == "GET" { await beforeScrape() }
            return Self.respond(method: method, path: path, registry: registry, help: help, liveness: liveness, readiness: readiness)
        }
    }

    public var port: Int { server.port }

    /// Serves until graceful shutdown; placed first in a ServiceGroup, it stops last.
    public func run() async throws {
        try? await gracefulShutdown()
        await shutdown()
    }

    public func shutdown() async {
        await server.shutdown()
    }

    static func respond(method: String, path: String, registry: PrometheusCollectorRegistry, help: [String: String],
                        liveness: Checks, readiness: Checks) -> OpsResponse {
        guard method == "GET" || method == "HEAD" else { return .text(405, "method not allowed\n") }
        switch path {
        case "/metrics":
            var buffer: [UInt8] = []
            registry.emit(into: &buffer)
            return OpsResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8",
                               body: Array(withHelp(String(decoding: buffer, as: UTF8.self), help).utf8))
        case "/healthz":
            return report(liveness())
        case "/readyz":
            return report(readiness())
        default:
            return .text(404, "not found\n")
        }
    }

    /// Puts a `# HELP` line before each `# TYPE` line whose metric has help text.
    static func withHelp(_ exposition: String, _ help: [String: String]) -> String {
        guard !help.isEmpty else { return exposition }
        var text = ""
        text.reserveCapacity(exposition.utf8.count + help.count * 80)
        for line in exposition.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("# TYPE "), let name = line.split(separator: " ").dropFirst(2).first,
                let description = help[String(name)] {
                text += "# HELP \(name) \(description)\n"
            }
            text += line
            text += "\n"
        }
        return String(text.dropLast())
    }

    /// 200 when every check passes, else 503; the JSON body names each check.
    static func report(_ checks: [Check]) -> OpsResponse {
        var details = JSONObjectWriter()
        for check in checks {
            var entry = JSONObjectWriter()
            entry.add("ok", check.ok)
            entry.add("detail", check.detail)
            details.add(check.name, entry)
        }
        let ok = checks.allSatisfy(\.ok)
        var body = JSONObjectWriter()
        body.add("status", ok ? "ok" : "failing")
        if !ok { body.add("failing", checks.filter { !$0.ok }.map(\.name).joined(separator: ",")) }
        body.add("checks", details)
        return .json(ok ? 200 : 503, body.json + "\n")
    }
}
