import Foundation
import InputFormats
import Testing

/// `--input-mapping`, `--input-format` and `fleet-relay mapping` as a user meets them: the
/// binary's exit status, output and errors.
@Suite struct MappingCommandTests {
    func file(_ text: String, suffix: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("mapping-\(UUID().uuidString)\(suffix)").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    func run(_ arguments: [String]) async throws -> IntegrationTests.CommandLineTests.Finished {
        try await IntegrationTests.CommandLineTests().run(arguments)
    }

    @Test func aBadMappingFileStopsStartupWithOneLineNamingThePlace() async throws {
        let mapping = try file("fields:\n  vehicle_id: id\n  lat: la\n  lng: lo\n  recorded_at: t\n  speed_mps: { path: s, unit: kph }\n",
                               suffix: ".yaml")
        let result = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "/nonexistent/k", "--input-mapping", mapping])
        #expect(result.status == 78, "before any key, broker or Fleet Engine is touched: \(result.stderr)")
        #expect(result.stderr == "fleet-relay: error: --input-mapping \(mapping): line 6: fields.speed_mps.unit: unknown unit \"kph\" (one of m/s, km/h, mph, knots)\n")
        let missing = try await run(["replay", "--brokers", "b", "--topic", "t", "--key-file", "k", "--from", "-1h", "--to-end",
                                     "--input-mapping", "/nonexistent/m.yaml"])
        #expect(missing.status == 78)
        #expect(missing.stderr == "fleet-relay: error: --input-mapping /nonexistent/m.yaml: cannot read /nonexistent/m.yaml\n")
    }

    @Test func aMappingAndABuiltInFormatTogetherAreAUsageError() async throws {
        let result = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k",
                                    "--input-format", "traccar", "--input-mapping", "m.yaml"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("--input-mapping and --input-format exclude each other"))
        let unknown = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k", "--input-format", "gpx"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.split(separator: "\n").count == 1)
    }

    @Test func showPrintsEachBuiltInFormat() async throws {
        for format in BuiltInFormat.allCases {
            let result = try await run(["mapping", "show", format.rawValue])
            #expect(result.status == 0)
            #expect(result.stdout == format.mappingText)
            #expect(throws: Never.self) { try MappingFile.parse(result.stdout, name: "shown") }
        }
    }

    @Test func checkPrintsTheRequestOrTheReasonForEveryRecord() async throws {
        let mapping = try file("""
            {"skip": [{"path": "kind", "equals": "ping"}],
             "fields": {"vehicle_id": "unit.id", "lat": "gps.lat", "lng": "gps.lon",
                        "recorded_at": {"path": "gps.ts", "format": "epoch-millis"},
                        "speed_mps": {"path": "gps.kmh", "unit": "km/h"}}}
            """, suffix: ".json")
        let records = try file("""
            {"unit":{"id":"van-7"},"gps":{"lat":52.52,"lon":13.405,"ts":1795381200123,"kmh":72}}
            {"kind":"ping","unit":{"id":"van-7"}}
            {"unit":{"id":"van-7"},"gps":{"lat":52.52,"ts":1795381200123}}

            """, suffix: ".jsonl")
        let result = try await run(["mapping", "check", "--input-mapping", mapping, "--file", records, "--provider", "acme"])
        #expect(result.status == 1, "a rejected record fails the check")
        #expect(result.stdout == """
            record 1: PUT /v1/providers/acme/vehicles/van-7?updateMask=last_location {"lastLocation":{"supplementalLocation":{"latitude":52.52,"longitude":13.405},"supplementalLocationTime":"2026-11-22T21:00:00.123Z","supplementalLocationSensor":"CUSTOMER_SUPPLIED_LOCATION","speed":20}}
            record 2: skipped: kind is "ping"
            record 3: rejected (missing_field): Required field lng is missing at gps.lon.
            3 records: 1 sent, 1 skipped, 1 rejected

            """)
        let good = try file("{\"unit\":{\"id\":\"van-7\"},\"gps\":{\"lat\":1,\"lon\":2,\"ts\":1795381200000}}\n", suffix: ".jsonl")
        let passing = try await run(["mapping", "check", "--input-mapping", mapping, "--file", good])
        #expect(passing.status == 0)
        #expect(passing.stdout.hasSuffix("1 records: 1 sent, 0 skipped, 0 rejected\n"))
    }
}
