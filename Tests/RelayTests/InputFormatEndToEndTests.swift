import FleetEngine
import FleetModel
import Foundation
import InputFormats
import JSON
import Kafka
import Relay
import Testing

/// Each built-in format through the relay: records shaped as the product emits them go in,
/// and the emulator receives exactly the fixes they carry; records the format skips are
/// committed and counted, neither sent nor dead-lettered.
@Suite(.serialized) struct InputFormatEndToEndTests {
    /// One fix as the test means it, in the units Fleet Engine takes.
    struct Fix {
        let vehicle: String
        let latitude: Double
        let longitude: Double
        let milliseconds: Int64
        let speedMetersPerSecond: Double
        let heading: Int
    }

    /// Three vehicles, two fixes each, 2026-11-22T21:00:00Z onward; milliseconds that matter.
    static func fixes(wholeSeconds: Bool) -> [Fix] {
        var fixes: [Fix] = []
        for vehicle in 0..<3 {
            for index in 0..<2 {
                let offset = Int64(vehicle * 10_000 + index * 5_000) + (wholeSeconds ? 0 : 123 + Int64(index))
                fixes.append(Fix(vehicle: "truck-\(vehicle)", latitude: 48.8 + Double(vehicle) * 0.01 + Double(index) * 0.001,
                                 longitude: 2.29 + Double(vehicle) * 0.01, milliseconds: 1_795_381_200_000 + offset,
                                 speedMetersPerSecond: 10 + Double(index) * 2.5, heading: 90 * (vehicle + 1) % 360))
            }
        }
        return fixes
    }

    typealias Record = (key: [UInt8]?, value: [UInt8])

    static func record(_ key: String?, _ json: String) -> Record {
        (key.map { Array($0.utf8) }, Array(json.utf8))
    }

    /// `2026-11-22T22:00:00.123+01:00`: Jackson's ISO 8601 as Traccar writes dates, an hour east;
    /// or `2026-11-22T21:00:00.123+0000`, the offset without a colon, as Traccar's own
    /// `yyyy-MM-dd'T'HH:mm:ss.SSSZ` date format writes UTC.
    static func jacksonTime(_ milliseconds: Int64, colonlessUTC: Bool = false) -> String {
        if colonlessUTC { return String(RFC3339.format(milliseconds: milliseconds).dropLast()) + "+0000" }
        let utc = RFC3339.format(milliseconds: milliseconds + 3_600_000)
        return String(utc.dropLast()) + "+01:00"
    }

    /// The fixes as the product's records, plus records the format skips.
    static func records(_ format: BuiltInFormat, _ fixes: [Fix]) -> [Record] {
        switch format {
        case .traccar:
            fixes.enumerated().map { number, fix in
                record(String(100 + number / 2), """
                    {"position":{"id":\(number),"deviceId":\(100 + number / 2),"protocol":"teltonika",
                    "serverTime":"\(jacksonTime(fix.milliseconds + 900))","deviceTime":"\(jacksonTime(fix.milliseconds))",
                    "fixTime":"\(jacksonTime(fix.milliseconds, colonlessUTC: number % 2 == 1))","outdated":false,"valid":true,"latitude":\(fix.latitude),
                    "longitude":\(fix.longitude),"altitude":0.0,"speed":\(fix.speedMetersPerSecond * 3600 / 1852),
                    "course":\(fix.heading).0,"accuracy":0.0,"network":null,"geofenceIds":null,"attributes":{"ignition":true}},
                    "device":{"id":\(100 + number / 2),"name":"Truck","uniqueId":"\(fix.vehicle)","status":"online"}}
                    """)
            } + [record("100", #"{"position":{"deviceId":100,"valid":false,"outdated":false,"latitude":0,"longitude":0,"fixTime":"2026-11-22T22:00:09.000+01:00"},"device":{"id":100,"uniqueId":"truck-0"}}"#)]
        case .owntracks:
            fixes.enumerated().map { number, fix in
                // OwnTracks topics are owntracks/USER/DEVICE: owntracks/truck/0 is vehicle truck-0. Every
                // other record carries it as the payload's `topic` (HTTP mode, most bridges) and has no key;
                // the fields are those of the booklet's _type=location.
                let topic = "owntracks/" + fix.vehicle.replacingOccurrences(of: "-", with: "/")
                let topicField = number % 2 == 1 ? #","topic":"\#(topic)""# : ""
                return record(number % 2 == 1 ? nil : topic, """
                    {"_type":"location","tid":"TR","lat":\(fix.latitude),"lon":\(fix.longitude),"tst":\(fix.milliseconds / 1000),
                    "created_at":\(fix.milliseconds / 1000 + 2),"vel":\(Int(fix.speedMetersPerSecond * 3.6)),"cog":\(fix.heading),
                    "acc":5,"alt":35,"vac":3,"batt":80,"bs":1,"conn":"m","m":1,"t":"u","inregions":["depot"]\(topicField)}
                    """)
            } + [record("owntracks/truck/0", #"{"_type":"lwt","tst":1795381100}"#),
                 record("owntracks/truck/1", #"{"_type":"transition","event":"leave","tst":1795381100,"wtst":1}"#)]
        case .geojson:
            fixes.map { fix in
                record(fix.vehicle, """
                    {"type":"Feature","geometry":{"type":"Point","coordinates":[\(fix.longitude),\(fix.latitude)]},
                    "properties":{"vehicle_id":"\(fix.vehicle)","recorded_at":"\(RFC3339.format(milliseconds: fix.milliseconds))",
                    "speed_mps":\(fix.speedMetersPerSecond),"heading":\(fix.heading)}}
                    """)
            }
        case .debezium:
            fixes.enumerated().map { number, fix in
                let time = String(RFC3339.format(milliseconds: fix.milliseconds).dropLast()) + "456Z"  // microseconds, as ZonedTimestamp
                // A snapshot read (r), an insert (c) and an update (u, with the row before) in turn.
                let op = ["r", "c", "u"][number % 3]
                let before = op == "u" ? #"{"id":\#(number),"vehicle_id":"\#(fix.vehicle)","lat":0,"lng":0,"recorded_at":"2026-01-01T00:00:00Z"}"# : "null"
                // Keyed by vehicle (Debezium's message.key.columns), so one vehicle's rows share a partition.
                return record(#"{"schema":{"type":"struct"},"payload":{"vehicle_id":"\#(fix.vehicle)"}}"#, """
                    {"schema":{"type":"struct","name":"fleet.public.locations.Envelope","optional":false},
                    "payload":{"before":\(before),"after":{"id":\(number),"vehicle_id":"\(fix.vehicle)","lat":\(fix.latitude),
                    "lng":\(fix.longitude),"recorded_at":"\(time)","speed_mps":\(fix.speedMetersPerSecond),"heading":\(fix.heading)},
                    "source":{"version":"2.7.0.Final","connector":"postgresql","name":"fleet","db":"fleet","table":"locations",
                    "snapshot":"\(op == "r" ? "true" : "false")"},
                    "op":"\(op)","ts_ms":\(fix.milliseconds + 40),"transaction":null}}
                    """)
            } + [record(#"{"payload":{"vehicle_id":"truck-0"}}"#, #"{"schema":{},"payload":{"before":{"id":0},"after":null,"op":"d","ts_ms":1795381299000}}"#),
                 (Array(#"{"payload":{"vehicle_id":"truck-0"}}"#.utf8), [])]
        case .native:
            []
        }
    }

    /// How many of `records` the format skips.
    static func skipped(_ format: BuiltInFormat) -> Int {
        switch format {
        case .traccar: 1
        case .owntracks, .debezium: 2
        case .geojson, .native: 0
        }
    }

    @Test(arguments: [BuiltInFormat.traccar, .owntracks, .geojson, .debezium])
    func productRecordsArriveAsTheirFixes(_ format: BuiltInFormat) async throws {
        // OwnTracks records without a key (their topic in the payload) land on any partition: one
        // partition keeps each vehicle's fixes in order.
        let harness = try await RelayHarness(partitions: format == .owntracks ? 1 : 2)
        // OwnTracks times are whole seconds.
        let fixes = Self.fixes(wholeSeconds: format == .owntracks)
        let records = Self.records(format, fixes)
        try await harness.produce(records)
        let running = try harness.startRelay(group: "format-\(format)") { $0.inputMapping = format.mapping }

        try await eventually("every fix reached the emulator") {
            fixes.allSatisfy { fix in
                harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: fix.vehicle))?.receivedFixTimes.contains(fix.milliseconds) ?? false
            }
        }
        try await eventually("every record is committed") { try await harness.committedToTheEnd(group: "format-\(format)") }
        try await eventually("every record is finished") { running.relay.statistics.snapshot.finished == records.count }
        let totals = running.relay.statistics.snapshot
        #expect(totals.skipped == Self.skipped(format))
        #expect(totals.deadLettered == 0)
        for newest in Dictionary(grouping: fixes, by: \.vehicle).values.compactMap({ $0.max { $0.milliseconds < $1.milliseconds } }) {
            let held = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: newest.vehicle))).lastLocation
            #expect(held["supplementalLocation"]?["latitude"]?.numberValue == newest.latitude)
            #expect(held["supplementalLocation"]?["longitude"]?.numberValue == newest.longitude)
            #expect(held["supplementalLocationTime"]?.stringValue == RFC3339.format(milliseconds: newest.milliseconds))
            let speed = try #require(held["speed"]?.numberValue)
            #expect(abs(speed - newest.speedMetersPerSecond) < 1e-9, "\(speed) m/s")
            #expect(held["heading"]?.numberValue == Double(newest.heading))
        }
        try await running.stop()
        await harness.shutdown()
    }

    @Test func aRecordThatDoesNotFitIsDeadLetteredWithThePath() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let line = #"{"type":"Feature","geometry":{"type":"LineString","coordinates":[[2.2,48.8],[2.3,48.9]]},"properties":{"vehicle_id":"v1","recorded_at":"2026-11-22T21:00:00Z"}}"#
        let point = #"{"type":"Feature","geometry":{"type":"Point","coordinates":[2.2,48.8]},"properties":{"vehicle_id":"v1","recorded_at":"2026-11-22T21:00:01Z"}}"#
        try await harness.produce([Self.record("v1", line), Self.record("v1", point)])
        let running = try harness.startRelay(group: "format-bad") { $0.inputMapping = BuiltInFormat.geojson.mapping }
        let letters = try await harness.readDeadLetters(count: 1)
        #expect(letters.count == 1)
        #expect(letters.first?.value == Array(line.utf8), "the record unchanged")
        #expect(letters.first?.header("fleet-relay-error") == "wrong_type")
        #expect(letters.first?.header("fleet-relay-detail")?.hasPrefix("at geometry.coordinates:") == true)
        try await eventually("the point behind it is delivered") {
            harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "v1"))?.locationTimeMilliseconds == 1_795_381_201_000
        }
        try await eventually("both are committed") { try await harness.committedToTheEnd(group: "format-bad") }
        try await running.stop()
        await harness.shutdown()
    }
}

extension InputFormatEndToEndTests {
    /// A gateway that names the vehicle in a record header, not in the value: the consumer
    /// reads headers for this mapping (it skips them for mappings that take nothing from one).
    @Test func aVehicleNamedInARecordHeaderArrivesUnderThatName() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let mapping = try MappingFile.parse("""
            fields:
              vehicle_id: { header: x-vehicle }
              lat: position.lat
              lng: position.lng
              recorded_at: position.at
            """, name: "header-gateway")
        let fixes = Self.fixes(wholeSeconds: false)
        try await KafkaProducer.run(configuration: harness.kafka, logger: harness.logger) { producer in
            for fix in fixes {
                let value = #"{"position":{"lat":\#(fix.latitude),"lng":\#(fix.longitude),"at":\#(fix.milliseconds)}}"#
                try await producer.send(topic: harness.topic, key: nil, value: Array(value.utf8),
                                        headers: [KafkaHeader(name: "x-vehicle", value: fix.vehicle)])
            }
        }
        let running = try harness.startRelay(group: "header-gateway") { $0.inputMapping = mapping }
        try await eventually("every fix reached the emulator under the header's vehicle") {
            fixes.allSatisfy { fix in
                harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: fix.vehicle))?.receivedFixTimes.contains(fix.milliseconds) ?? false
            }
        }
        #expect(running.relay.statistics.snapshot.deadLettered == 0)
        try await running.stop()
        await harness.shutdown()
    }

    /// A Debezium row of PostgreSQL with Debezium's defaults and the converter's schemas:
    /// `timestamp` as MicroTimestamp (integer microseconds), `numeric(9,6)` coordinates as
    /// Decimal (base64 unscaled bytes, the scale in the schema). Read without the schema the
    /// microseconds would be milliseconds 1,000 times too late and the coordinates text.
    @Test func debeziumWithSchemasIsReadByItsSemanticTypes() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let fixes = Self.fixes(wholeSeconds: false)
        let records = fixes.enumerated().map { number, fix in
            Self.record(#"{"payload":{"vehicle_id":"\#(fix.vehicle)"}}"#, Self.debeziumWithSchema(fix, id: number, op: ["r", "c", "u"][number % 3]))
        }
        try await harness.produce(records)
        let running = try harness.startRelay(group: "debezium-schemas") { $0.inputMapping = BuiltInFormat.debezium.mapping }
        try await eventually("every fix reached the emulator at its time") {
            fixes.allSatisfy { fix in
                harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: fix.vehicle))?.receivedFixTimes.contains(fix.milliseconds) ?? false
            }
        }
        #expect(running.relay.statistics.snapshot.deadLettered == 0)
        for newest in Dictionary(grouping: fixes, by: \.vehicle).values.compactMap({ $0.max { $0.milliseconds < $1.milliseconds } }) {
            let held = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: newest.vehicle))).lastLocation
            // numeric(9,6): the decimal's value, to its six places.
            #expect(abs((held["supplementalLocation"]?["latitude"]?.numberValue ?? 0) - newest.latitude) < 1e-9)
            #expect(abs((held["supplementalLocation"]?["longitude"]?.numberValue ?? 0) - newest.longitude) < 1e-9)
        }
        try await running.stop()
        await harness.shutdown()
    }

    /// The row as Debezium's JSON converter writes it with schemas enabled.
    static func debeziumWithSchema(_ fix: Fix, id: Int, op: String) -> String {
        let micros = fix.milliseconds * 1000 + 456
        let row = #"""
            {"id":\#(id),"vehicle_id":"\#(fix.vehicle)","lat":"\#(decimalBase64(fix.latitude, scale: 6))",\#
            "lng":"\#(decimalBase64(fix.longitude, scale: 6))","recorded_at":\#(micros),"speed_mps":\#(fix.speedMetersPerSecond),\#
            "heading":\#(fix.heading)}
            """#
        let columns = #"""
            [{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":false,"field":"vehicle_id"},\#
            {"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,\#
            "parameters":{"scale":"6","connect.decimal.precision":"9"},"field":"lat"},\#
            {"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,\#
            "parameters":{"scale":"6","connect.decimal.precision":"9"},"field":"lng"},\#
            {"type":"int64","optional":false,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"recorded_at"},\#
            {"type":"double","optional":true,"field":"speed_mps"},{"type":"int32","optional":true,"field":"heading"}]
            """#
        return #"""
            {"schema":{"type":"struct","fields":[\#
            {"type":"struct","fields":\#(columns),"optional":true,"name":"fleet.public.locations.Value","field":"before"},\#
            {"type":"struct","fields":\#(columns),"optional":true,"name":"fleet.public.locations.Value","field":"after"},\#
            {"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],\#
            "optional":false,"name":"fleet.public.locations.Envelope","version":2},\#
            "payload":{"before":null,"after":\#(row),"op":"\#(op)","ts_ms":\#(fix.milliseconds + 40)}}
            """#
    }

    /// The unscaled value of `value` at `scale`, as big-endian two's-complement bytes in base64.
    static func decimalBase64(_ value: Double, scale: Int) -> String {
        var unscaled = Int64((value * pow(10, Double(scale))).rounded())
        var bytes: [UInt8] = []
        repeat {
            bytes.insert(UInt8(truncatingIfNeeded: unscaled), at: 0)
            unscaled >>= 8
        } while unscaled != 0 && unscaled != -1
        if (unscaled == 0 && bytes[0] & 0x80 != 0) || (unscaled == -1 && bytes[0] & 0x80 == 0) {
            bytes.insert(unscaled == 0 ? 0 : 0xFF, at: 0)
        }
        return Data(bytes).base64EncodedString()
    }
}
