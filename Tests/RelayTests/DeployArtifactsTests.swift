import Foundation
import JSON
import Relay
import Testing

/// The dashboard and alert rules shipped in deploy/ must be valid and name only
/// metrics the relay exposes.
@Suite struct DeployArtifactsTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func metricNames(in text: String) -> Set<String> {
        let pattern = try! NSRegularExpression(pattern: "fleet_relay_[a-z_]+")
        let range = NSRange(text.startIndex..., in: text)
        return Set(pattern.matches(in: text, range: range).map { match in
            var name = String(text[Range(match.range, in: text)!])
            for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) && RelayMetricNames.help[name] == nil {
                name.removeLast(suffix.count)
            }
            return name
        })
    }

    @Test func alertRulesPassPromtoolAndNameKnownMetrics() async throws {
        let path = Self.root.appendingPathComponent("deploy/prometheus/alerts.yml").path
        let promtool = try #require(which("promtool"), "promtool (Debian's prometheus package, installed by make deps) checks the rules")
        let check = try await runTool(promtool, ["check", "rules", path], input: "")
        #expect(check.status == 0, "promtool: \(check.output)")
        let names = Self.metricNames(in: try String(contentsOfFile: path, encoding: .utf8))
        #expect(!names.isEmpty)
        #expect(names.subtracting(RelayMetricNames.help.keys).isEmpty, "unknown metrics: \(names.subtracting(RelayMetricNames.help.keys))")
    }

    @Test func dashboardPanelsUseTheDatasourceVariableAndKnownMetrics() throws {
        let path = Self.root.appendingPathComponent("deploy/grafana/fleet-relay.json").path
        let dashboard = try JSONParser.parse(Array(try Data(contentsOf: URL(fileURLWithPath: path))))
        let variables = try #require(dashboard["templating"]?["list"]?.arrayValue)
        #expect(variables.contains { $0["name"] == .string("datasource") && $0["type"] == .string("datasource") })
        let panels = try #require(dashboard["panels"]?.arrayValue)
        #expect(panels.count >= 6)
        var expressions: [String] = []
        for panel in panels {
            #expect(panel["title"]?.stringValue?.isEmpty == false)
            #expect(panel["datasource"]?["uid"] == .string("${datasource}"))
            let targets = try #require(panel["targets"]?.arrayValue)
            #expect(!targets.isEmpty)
            for target in targets {
                #expect(target["datasource"]?["uid"] == .string("${datasource}"))
                expressions.append(try #require(target["expr"]?.stringValue))
            }
        }
        let names = Self.metricNames(in: expressions.joined(separator: "\n"))
        #expect(names.subtracting(RelayMetricNames.help.keys).isEmpty, "unknown metrics: \(names.subtracting(RelayMetricNames.help.keys))")
        for required in ["fleet_relay_consumer_lag", "fleet_relay_end_to_end_seconds", "fleet_relay_records_finished_total",
                         "fleet_relay_fleet_engine_requests_total", "fleet_relay_tokens_minted_total"] {
            #expect(names.contains(required), "the dashboard shows \(required)")
        }
    }
}
