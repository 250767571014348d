import FleetEngine
import FleetModel
import Foundation
import InputFormats
import JSON
import Testing

/// Mappings and built-in formats on records shaped as the products emit them: the event
/// each yields (values checked against hand-computed ones), what is skipped, and rejections
/// that name their path.
@Suite struct InputMappingTests {
    /// 2026-11-22T21:01:00Z, just after the records' fixes.
    static let now: Int64 = 1_795_381_260_000

    func decoder(_ format: BuiltInFormat) -> MappedJSONDecoder {
        MappedJSONDecoder(mapping: format.mapping, nowMilliseconds: { Self.now })
    }

    func decoder(yaml: String) throws -> MappedJSONDecoder {
        MappedJSONDecoder(mapping: try MappingFile.parse(yaml, name: "test"), nowMilliseconds: { Self.now })
    }

    func record(_ json: String, key: String? = nil, headers: [String: String] = [:], timestamp: Int64? = nil) -> InputRecord {
        InputRecord(key: key.map { Array($0.utf8) }, value: Array(json.utf8),
                    headers: headers.map { InputRecord.Header(name: $0.key, value: Array($0.value.utf8)) },
                    timestampMilliseconds: timestamp)
    }

    func update(_ outcome: DecodeOutcome, sourceLocation: SourceLocation = #_sourceLocation) throws -> LocationUpdate {
        guard case .update(let update) = outcome else {
            Issue.record("expected an update, got \(outcome)", sourceLocation: sourceLocation)
            throw CancellationError()
        }
        return update
    }

    // MARK: The native format as a mapping

    @Test func theNativeMappingDecidesEverySampleLikeTheNativeDecoder() throws {
        let native = LocationEventDecoder(defaultKind: .vehicle, nowMilliseconds: { Self.now })
        let mapped = decoder(.native)
        for sample in try Fixtures.good + Fixtures.bad {
            let record = InputRecord(key: sample.key, value: sample.value)
            let expected = native.decode(record)
            let actual = mapped.decode(record)
            let text = String(decoding: sample.value.prefix(100), as: UTF8.self)
            switch (expected, actual) {
            case (.update(let left), .update(let right)):
                #expect(left == right, "\(text)")
            case (.rejected(let left), .rejected(let right)):
                #expect(left.reason == right.reason, "\(text): \(left.detail) / \(right.detail)")
            default:
                Issue.record("\(text): native \(expected), mapped \(actual)")
            }
        }
    }

    // MARK: Built-in formats

    @Test func traccarPositionsInKnotsWithJacksonTimes() throws {
        let traccar = decoder(.traccar)
        let position = """
            {"position":{"id":81,"deviceId":7,"protocol":"osmand","serverTime":"2026-11-22T21:00:01.000+00:00",
            "deviceTime":"2026-11-22T21:00:00.000+00:00","fixTime":"2026-11-22T22:00:00.123+01:00","outdated":false,
            "valid":true,"latitude":48.85833,"longitude":2.29513,"altitude":35.5,"speed":10.0,"course":359.6,
            "accuracy":0.0,"network":null,"attributes":{"batteryLevel":90,"motion":true}},
            "device":{"id":7,"name":"Truck 7","uniqueId":"864-7","status":"online","disabled":false}}
            """
        let fix = try update(traccar.decode(record(position, key: "7")))
        #expect(fix.vehicle == VehicleIdentity(kind: .vehicle, id: "864-7"), "the device's uniqueId, not the key (Traccar's internal id)")
        #expect(fix.fix.latitude == 48.85833 && fix.fix.longitude == 2.29513)
        #expect(fix.fix.recordedAtMilliseconds == 1_795_381_200_123, "22:00:00.123+01:00, milliseconds kept")
        #expect(abs(fix.fix.speedMetersPerSecond! - 5.144_444) < 0.000_001, "10 knots")
        #expect(fix.fix.heading == 0, "359.6 rounds to 360, which is 0")
        #expect(fix.fix.altitudeMeters == 35.5)
        #expect(fix.fix.accuracyMeters == nil, "accuracy 0 is Traccar's unknown")

        let olderJackson = position.replacingOccurrences(of: "22:00:00.123+01:00", with: "22:00:00.123+0100")
        #expect(try update(traccar.decode(record(olderJackson))).fix.recordedAtMilliseconds == 1_795_381_200_123)
        let course360 = position.replacingOccurrences(of: "\"course\":359.6", with: "\"course\":360.0")
        #expect(try update(traccar.decode(record(course360))).fix.heading == 0)

        let invalid = position.replacingOccurrences(of: "\"valid\":true", with: "\"valid\":false")
        #expect(traccar.decode(record(invalid)) == .skipped("position.valid is false"))
        let outdated = position.replacingOccurrences(of: "\"outdated\":false", with: "\"outdated\":true")
        #expect(traccar.decode(record(outdated)) == .skipped("position.outdated is true"))
    }

    @Test func ownTracksLocationsInEpochSecondsAndKilometresPerHour() throws {
        let owntracks = decoder(.owntracks)
        let location = """
            {"_type":"location","tid":"JP","lat":48.85833,"lon":2.29513,"tst":1795381200,"vel":36,"cog":271,
            "acc":5,"alt":35,"batt":41,"conn":"m","created_at":1795381201,"topic":"owntracks/jane/phone"}
            """
        let fix = try update(owntracks.decode(record(location)))
        #expect(fix.vehicle.id == "jane-phone")
        #expect(fix.fix.recordedAtMilliseconds == 1_795_381_200_000)
        #expect(fix.fix.speedMetersPerSecond == 10, "36 km/h")
        #expect(fix.fix.heading == 271 && fix.fix.accuracyMeters == 5 && fix.fix.altitudeMeters == 35)

        let withoutTopic = location.replacingOccurrences(of: ",\"topic\":\"owntracks/jane/phone\"", with: "")
        #expect(try update(owntracks.decode(record(withoutTopic, key: "owntracks/joe/car"))).vehicle.id == "joe-car",
                "the record key when the message has no topic")
        #expect(owntracks.decode(record(#"{"_type":"transition","event":"enter","tst":1795381200}"#)) == .skipped(#"_type is not "location""#))
        guard case .rejected(let rejection) = owntracks.decode(record(withoutTopic)) else {
            Issue.record("a location without topic or key was accepted")
            return
        }
        #expect(rejection.reason == .missingField)
        #expect(rejection.detail.contains("topic or the record key"), "\(rejection.detail)")
    }

    @Test func geoJSONPointFeatures() throws {
        let feature = """
            {"type":"Feature","geometry":{"type":"Point","coordinates":[2.29513,48.85833,35.5]},
            "properties":{"vehicle_id":"veh-1","recorded_at":"2026-11-22T21:00:00.123Z","heading":90,"speed_mps":3.5,
            "accuracy_m":4,"sensor":"GPS","kind":"delivery_vehicle"}}
            """
        let fix = try update(decoder(.geojson).decode(record(feature)))
        #expect(fix.vehicle == VehicleIdentity(kind: .deliveryVehicle, id: "veh-1"))
        #expect(fix.fix == LocationFix(latitude: 48.85833, longitude: 2.29513, recordedAtMilliseconds: 1_795_381_200_123,
                                       heading: 90, speedMetersPerSecond: 3.5, accuracyMeters: 4, altitudeMeters: 35.5, sensor: .gps))
        let line = feature.replacingOccurrences(of: #"{"type":"Point","coordinates":[2.29513,48.85833,35.5]}"#,
                                                with: #"{"type":"LineString","coordinates":[[2.2,48.8],[2.3,48.9]]}"#)
        guard case .rejected(let rejection) = decoder(.geojson).decode(record(line)) else {
            Issue.record("a LineString was taken for a point")
            return
        }
        #expect(rejection.reason == .wrongType && rejection.detail.hasPrefix("at geometry.coordinates"))
    }

    @Test func debeziumChangeEventsWithAndWithoutSchemas() throws {
        let debezium = decoder(.debezium)
        let withSchema = """
            {"schema":{"type":"struct","name":"fleet.public.vehicle_locations.Envelope"},"payload":{"before":null,
            "after":{"id":1,"vehicle_id":"veh-9","lat":1.5,"lng":2.5,"recorded_at":"2026-11-22T21:00:00.123456Z",
            "speed_mps":2.0,"heading":null},"source":{"connector":"postgresql","table":"vehicle_locations"},
            "op":"c","ts_ms":1795381200500}}
            """
        let created = try update(debezium.decode(record(withSchema, key: #"{"id":1}"#)))
        #expect(created.vehicle.id == "veh-9")
        #expect(created.fix == LocationFix(latitude: 1.5, longitude: 2.5, recordedAtMilliseconds: 1_795_381_200_123, speedMetersPerSecond: 2))
        let withoutSchema = #"{"before":null,"after":{"vehicle_id":"veh-9","lat":1.5,"lng":2.5,"recorded_at":1795381200999},"op":"u"}"#
        #expect(try update(debezium.decode(record(withoutSchema))).fix.recordedAtMilliseconds == 1_795_381_200_999)
        #expect(debezium.decode(record(#"{"before":{"id":1},"after":null,"op":"d","ts_ms":1}"#)) == .skipped(#"op is one of "d", "t""#))
        #expect(debezium.decode(record(#"{"payload":{"before":{"id":1},"after":null,"op":"d"}}"#)) == .skipped(#"payload.op is one of "d", "t""#))
        #expect(debezium.decode(record("")) == .skipped("the record has no value"), "the tombstone after a delete")
    }

    // MARK: Custom mappings

    static let fleetMapping = """
        # A telematics gateway's JSON.
        envelope: data
        skip:
          - { path: data.fix.status, in: [ NO_FIX, INVALID ] }   # skip rules see the whole record
          - { path: data.fix.coords, absent: true }
        fields:
          vehicle_id: { first_of: [ { header: vehicle }, { path: "unit['serial.no']" } ], replace: { ":": "_" } }
          lat: fix.coords[0]
          lng: fix.coords[1]
          recorded_at: { path: fix.time, format: iso8601-local, zone: Europe/Berlin }
          speed_mps: { path: fix.speed, unit: mph, convert: true }
          heading: { path: fix.bearing, default: 0 }
          sensor: { path: fix.source, map: { sat: GPS, cell: NETWORK } }
          kind: { constant: delivery_vehicle }
        """

    /// The consumer reads record headers only for a mapping that takes a field from one.
    @Test func onlyAMappingThatTakesAFieldFromAHeaderReadsHeaders() throws {
        #expect(try MappingFile.parse(Self.fleetMapping, name: "test").readsHeaders, "a header inside first_of")
        let direct = "fields:\n  vehicle_id: { header: vehicle }\n  lat: lat\n  lng: lng\n  recorded_at: t\n"
        #expect(try MappingFile.parse(direct, name: "test").readsHeaders)
        let withoutHeaders = Self.fleetMapping.replacingOccurrences(of: "{ header: vehicle }, ", with: "")
        #expect(try !MappingFile.parse(withoutHeaders, name: "test").readsHeaders)
        for format in BuiltInFormat.allCases {
            #expect(!format.mapping.readsHeaders, "\(format)")
        }
    }

    @Test func customMappingWithEnvelopeNestedPathsUnitsZonesAndMaps() throws {
        let mapped = try decoder(yaml: Self.fleetMapping)
        let summer = """
            {"data":{"unit":{"serial.no":"GW:0042"},"fix":{"coords":[52.52,13.405],"time":"2026-07-01 12:00:00.250",
            "speed":"22.369","source":"sat","status":"OK"}}}
            """
        let fix = try update(mapped.decode(record(summer)))
        #expect(fix.vehicle == VehicleIdentity(kind: .deliveryVehicle, id: "GW_0042"))
        #expect(fix.fix.latitude == 52.52 && fix.fix.longitude == 13.405)
        #expect(fix.fix.recordedAtMilliseconds == 1_782_900_000_250, "12:00:00.250 in Berlin's summer time is 10:00:00.250Z")
        #expect(abs(fix.fix.speedMetersPerSecond! - 10.0) < 0.001, "22.369 mph from numeric text")
        #expect(fix.fix.heading == 0, "the default")
        #expect(fix.fix.sensor == .gps)
        let winter = summer.replacingOccurrences(of: "2026-07-01 12:00:00.250", with: "2026-01-15T12:00:00")
        #expect(try update(mapped.decode(record(winter))).fix.recordedAtMilliseconds == 1_768_474_800_000, "+01:00 in winter")
        #expect(try update(mapped.decode(record(summer, headers: ["vehicle": "from-header"]))).vehicle.id == "from-header")
        #expect(mapped.decode(record(#"{"data":{"fix":{"status":"NO_FIX"}}}"#)) == .skipped(#"data.fix.status is one of "NO_FIX", "INVALID""#),
                "skip rules look at the whole record")
    }

    @Test func rejectionsNameThePathTheValueCameFrom() throws {
        let mapped = try decoder(yaml: Self.fleetMapping)
        func rejection(_ json: String) -> Rejection? {
            if case .rejected(let rejection) = mapped.decode(record(json)) { return rejection }
            return nil
        }
        let base = #"{"data":{"unit":{"serial.no":"GW1"},"fix":{"coords":[52.52,13.405],"time":"2026-07-01 12:00:00","source":"sat"}}}"#
        #expect(rejection(base) == nil)
        let far = rejection(base.replacingOccurrences(of: "52.52", with: "152.52"))
        #expect(far?.reason == .outOfRange && far?.detail.hasPrefix("at fix.coords[0]: lat must be") == true, "\(String(describing: far))")
        let noTime = rejection(base.replacingOccurrences(of: #","time":"2026-07-01 12:00:00""#, with: ""))
        #expect(noTime?.reason == .missingField && noTime?.detail == "Required field recorded_at is missing at fix.time.")
        let offset = rejection(base.replacingOccurrences(of: "2026-07-01 12:00:00", with: "2026-07-01T12:00:00Z"))
        #expect(offset?.reason == .badTimestamp && offset?.detail.hasPrefix("at fix.time:") == true)
        let sensor = rejection(base.replacingOccurrences(of: "\"sat\"", with: "\"wifi\""))
        #expect(sensor?.reason == .outOfRange && sensor?.detail.hasPrefix("at fix.source: sensor \"wifi\"") == true)
        let enveloped = try decoder(yaml: "envelope: [payload.after, after]\nfields: { vehicle_id: v, lat: a, lng: b, recorded_at: t }")
        #expect(enveloped.decode(record(#"{"payload":{"after":null}}"#))
            == .rejected(Rejection(reason: .missingField, detail: "The envelope payload.after or after holds no object.")))
        let wrongType = rejection(base.replacingOccurrences(of: "[52.52,13.405]", with: "[\"52.52\",13.405]"))
        #expect(wrongType?.reason == .wrongType && wrongType?.detail.contains("convert: true") == true, "numbers stay numbers without convert")
    }

    @Test func recordKeyTimestampAndEpochUnits() throws {
        let mapped = try decoder(yaml: """
            {"fields": {"vehicle_id": {"key": true}, "lat": "a", "lng": "b",
                        "recorded_at": {"first_of": [{"path": "t"}, {"timestamp": true}], "format": "epoch-micros"}}}
            """)
        let micros = try update(mapped.decode(record(#"{"a":1,"b":2,"t":1795381200123999}"#, key: "k-1")))
        #expect(micros.vehicle.id == "k-1" && micros.fix.recordedAtMilliseconds == 1_795_381_200_123)
        let microText = try update(mapped.decode(record(#"{"a":1,"b":2,"t":"1795381200123999"}"#, key: "k-1")))
        #expect(microText.fix.recordedAtMilliseconds == 1_795_381_200_123)
        let fromTimestamp = try update(mapped.decode(record(#"{"a":1,"b":2}"#, key: "k-1", timestamp: 1_795_381_200_456)))
        #expect(fromTimestamp.fix.recordedAtMilliseconds == 1_795_381_200_456, "the record timestamp is epoch milliseconds")
        let nanos = try decoder(yaml: "fields: { vehicle_id: v, lat: a, lng: b, recorded_at: { path: t, format: epoch-nanos } }")
        #expect(try update(nanos.decode(record(#"{"v":"x","a":1,"b":2,"t":"1795381200123456789"}"#))).fix.recordedAtMilliseconds == 1_795_381_200_123)
        let seconds = try decoder(yaml: "fields: { vehicle_id: v, lat: a, lng: b, recorded_at: { path: t, format: epoch-seconds } }")
        #expect(try update(seconds.decode(record(#"{"v":"x","a":1,"b":2,"t":1795381200.123}"#))).fix.recordedAtMilliseconds == 1_795_381_200_123)
    }

    // MARK: Mapping files

    @Test(arguments: [
        ("fieldz: {}", "line 1: fieldz: unknown key (one of description, envelope, key_must_match, connect_schema, skip, fields, coordinates)"),
        ("fields: { vehicle_id: v, lat: a, lng: b }", "line 1: fields.recorded_at: is missing: the event needs it"),
        ("fields: { vehicle_id: v, lat: a, lng: b, recorded_at: t, speed: s }",
         "line 1: fields.speed: unknown field (one of vehicle_id, lat, lng, recorded_at, heading, speed_mps, accuracy_m, altitude_m, sensor, kind)"),
        ("fields:\n  vehicle_id: v\n  lat: a\n  lng: b\n  recorded_at: t\n  speed_mps: { path: s, unit: kph }",
         "line 6: fields.speed_mps.unit: unknown unit \"kph\" (one of m/s, km/h, mph, knots)"),
        ("fields: { vehicle_id: \"a..b\", lat: a, lng: b, recorded_at: t }", "line 1: fields.vehicle_id: bad path \"a..b\": an empty key after '.'"),
        ("fields: { vehicle_id: v, lat: a, lng: b, recorded_at: { path: t, format: iso8601-local } }",
         "line 1: fields.recorded_at.zone: is missing: a time without offset needs its zone (UTC, +02:00, Europe/Berlin)"),
        ("fields: { vehicle_id: v, lat: a, lng: b, recorded_at: { path: t, format: iso8601-local, zone: Mars/Olympus } }",
         "line 1: fields.recorded_at.zone: unknown time zone \"Mars/Olympus\" (UTC, an offset like +02:00, or a name like Europe/Berlin)"),
        ("fields: { vehicle_id: { path: v, key: true }, lat: a, lng: b, recorded_at: t }",
         "line 1: fields.vehicle_id: names several sources (path, key); use first_of for alternatives"),
        ("fields: { vehicle_id: v, lat: { path: a, unit: knots }, lng: b, recorded_at: t }",
         "line 1: fields.lat.unit: unknown key (one of path, key, header, timestamp, constant, first_of, default, map, convert)"),
        ("coordinates: { path: c }\nfields: { vehicle_id: v, lat: a, recorded_at: t }",
         "line 2: fields: lat and lng come from coordinates; map them in one place only"),
        ("skip: [ { path: op } ]\nfields: { vehicle_id: v, lat: a, lng: b, recorded_at: t }",
         "line 1: skip[0]: needs exactly one of equals, not_equals, in, absent"),
        ("fields: { vehicle_id: v, lat: a\n", "line 2: not YAML or JSON: did not find expected ',' or '}'"),
    ])
    func badMappingFilesAreRefusedWithOneLineNamingThePlace(text: String, message: String) {
        #expect(throws: MappingError(description: message)) { try MappingFile.parse(text, name: "test") }
    }

    @Test func everyBuiltInFormatIsAValidMapping() {
        for format in BuiltInFormat.allCases {
            #expect(throws: Never.self) { try MappingFile.parse(format.mappingText, name: format.rawValue) }
        }
    }
}

extension InputMappingTests {
    /// One Debezium row with schemas, its `recorded_at` and `lat` of the semantic types given.
    func debeziumRow(time: (semantic: String, type: String, value: String),
                     latitude: (semantic: String?, parameters: String?, value: String)) -> String {
        let latitudeSchema = latitude.semantic.map { #""name":"\#($0)","type":"\#($0.hasSuffix("VariableScaleDecimal") ? "struct" : "bytes")","#
            + (latitude.parameters.map { #""parameters":\#($0),"# } ?? "") } ?? #""type":"double","#
        let columns = #"""
            [{"type":"string","field":"vehicle_id"},{\#(latitudeSchema)"field":"lat"},{"type":"double","field":"lng"},\#
            {"type":"\#(time.type)","name":"\#(time.semantic)","field":"recorded_at"}]
            """#
        return #"""
            {"schema":{"type":"struct","fields":[{"type":"struct","fields":\#(columns),"field":"after"},\#
            {"type":"string","field":"op"}]},"payload":{"after":{"vehicle_id":"dv-1","lat":\#(latitude.value),"lng":2.29,\#
            "recorded_at":\#(time.value)},"op":"c"}}
            """#
    }

    /// Each of Debezium's temporal types and both decimal forms read through the schema; the
    /// microseconds a schema-less read would take for milliseconds are rejected as out of range.
    @Test func debeziumSemanticTypesAreReadFromTheSchema() throws {
        let debezium = decoder(.debezium)
        let instant: Int64 = 1_795_381_200_123  // 2026-11-22T21:00:00.123Z
        let times: [(String, String, String)] = [
            ("io.debezium.time.MicroTimestamp", "int64", String(instant * 1000 + 456)),
            ("io.debezium.time.NanoTimestamp", "int64", String(instant * 1_000_000 + 456_789)),
            ("io.debezium.time.Timestamp", "int64", String(instant)),
            ("org.apache.kafka.connect.data.Timestamp", "int64", String(instant)),
            ("io.debezium.time.ZonedTimestamp", "string", #""2026-11-22T21:00:00.123456Z""#),
        ]
        for time in times {
            let row = debeziumRow(time: time, latitude: (nil, nil, "48.8583"))
            #expect(try update(debezium.decode(record(row))).fix.recordedAtMilliseconds == instant, "\(time.0)")
        }
        // numeric(9,6) 48.858300 and -33.856784: unscaled 48858300 and -33856784, big-endian; 488583 at scale 4.
        let decimals: [(String, String?, String, Double)] = [
            ("org.apache.kafka.connect.data.Decimal", #"{"scale":"6"}"#, #""AumEvA==""#, 48.8583),
            ("org.apache.kafka.connect.data.Decimal", #"{"scale":"6"}"#, #""/fti8A==""#, -33.856784),
            ("io.debezium.data.VariableScaleDecimal", nil, #"{"scale":4,"value":"B3SH"}"#, 48.8583),
        ]
        for (semantic, parameters, value, expected) in decimals {
            let row = debeziumRow(time: times[2], latitude: (semantic, parameters, value))
            let latitude = try update(debezium.decode(record(row))).fix.latitude
            #expect(abs(latitude - expected) < 1e-9, "\(semantic) \(value): \(latitude)")
        }

        // Without the schema, MicroTimestamp's microseconds are read as milliseconds: far in the future.
        var schemaless = try JSONParser.parse(Array(debeziumRow(time: times[0], latitude: (nil, nil, "48.8583")).utf8))
        if case .object(var document) = schemaless { document["schema"] = nil; schemaless = .object(document) }
        guard case .rejected(let rejection) = debezium.decode(record(schemaless.serialized())) else {
            Issue.record("microseconds read as milliseconds were accepted")
            return
        }
        #expect(rejection.detail.contains("recorded_at"), "\(rejection.detail)")
    }
}
