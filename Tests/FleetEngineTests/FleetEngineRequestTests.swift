import FleetEngine
import FleetModel
import JSON
import Testing

@Suite struct FleetEngineRequestTests {
    let fullFix = LocationFix(latitude: 37.422, longitude: -122.0841, recordedAtMilliseconds: 1_795_381_200_123,
                              heading: 90, speedMetersPerSecond: 12.5, accuracyMeters: 4, altitudeMeters: -12.5)
    let olderFix = LocationFix(latitude: 37.4, longitude: -122.08, recordedAtMilliseconds: 1_795_381_199_000, sensor: .gps)

    @Test func vehicleSupplementalIsAPutWithTheContractBody() throws {
        let update = VehicleLocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: "veh-00001"), lastLocation: fullFix)
        let request = FleetEngineRequest(update: update, provider: "my-project", mode: .supplemental)
        #expect(request.method == "PUT")
        #expect(request.pathAndQuery == "/v1/providers/my-project/vehicles/veh-00001?updateMask=last_location")
        #expect(request.body == #"{"lastLocation":{"supplementalLocation":{"latitude":37.422,"longitude":-122.0841},"#
            + #""supplementalLocationTime":"2026-11-22T21:00:00.123Z","supplementalLocationSensor":"CUSTOMER_SUPPLIED_LOCATION","#
            + #""supplementalLocationAccuracy":4,"heading":90,"speed":12.5,"altitude":-12.5}}"#)
    }

    @Test func deliveryVehicleDeviceModeIsAPatchWithPastLocationsInTheMask() throws {
        let update = VehicleLocationUpdate(vehicle: VehicleIdentity(kind: .deliveryVehicle, id: "d 1/ü"),
                                           lastLocation: fullFix, pastLocations: [olderFix])
        let request = FleetEngineRequest(update: update, provider: "p", mode: .device)
        #expect(request.method == "PATCH")
        #expect(request.pathAndQuery == "/v1/providers/p/deliveryVehicles/d%201%2F%C3%BC?updateMask=last_location,past_locations")
        let body = try JSONParser.parse(request.body)
        #expect(body["lastLocation"] == .object([
            "location": .object(["latitude": .number(37.422), "longitude": .number(-122.0841)]),
            "updateTime": .string("2026-11-22T21:00:00.123Z"), "latlngAccuracy": .number(4),
            "heading": .number(90), "speed": .number(12.5), "altitude": .number(-12.5),
        ]))
        #expect(body["pastLocations"] == .array([.object([
            "location": .object(["latitude": .number(37.4), "longitude": .number(-122.08)]),
            "updateTime": .string("2026-11-22T20:59:59.000Z"), "locationSensor": .string("GPS"),
        ])]))
    }

    /// The relay writes a body in one pass; the JSON library's writer, given the same members,
    /// must write the very same text, whatever the fix holds.
    @Test func bodiesAreTheTextTheJSONWriterWritesForTheirMembers() {
        var generator = SystemRandomNumberGenerator()
        func maybe<T>(_ value: @autoclosure () -> T) -> T? { Bool.random(using: &generator) ? value() : nil }
        func number(_ range: ClosedRange<Double>) -> Double {
            [0, -0.0, 1e15, 123_456_789_012_345, -1e-7, range.lowerBound, range.upperBound,
             Double.random(in: range, using: &generator), Double(Int.random(in: -1000...1000, using: &generator))]
                .randomElement(using: &generator)!
        }
        func randomFix() -> LocationFix {
            let time = [0, -1, 253_402_300_800_000, -62_167_219_200_001, 1_795_381_200_123,
                        Int64.random(in: -100_000_000_000_000...100_000_000_000_000, using: &generator)].randomElement(using: &generator)!
            return LocationFix(latitude: number(-90...90), longitude: number(-180...180), recordedAtMilliseconds: time,
                               heading: maybe([0, 359, -1, Int.max, Int.min].randomElement(using: &generator)!),
                               speedMetersPerSecond: maybe(number(0...100)), accuracyMeters: maybe(number(0...1e300)),
                               altitudeMeters: maybe(number(-1e-300...9000)), sensor: maybe(LocationSensor.allCases.randomElement(using: &generator)!))
        }
        func reference(_ fix: LocationFix, _ mode: LocationMode, _ location: inout JSONObjectWriter) {
            let time = RFC3339.format(milliseconds: fix.recordedAtMilliseconds)
            let point = { (writer: inout JSONObjectWriter) in
                writer.add("latitude", fix.latitude)
                writer.add("longitude", fix.longitude)
            }
            switch mode {
            case .supplemental:
                location.addObject("supplementalLocation", point)
                location.add("supplementalLocationTime", time)
                location.add("supplementalLocationSensor", (fix.sensor ?? .customerSupplied).fleetEngineName)
                if let accuracy = fix.accuracyMeters { location.add("supplementalLocationAccuracy", accuracy) }
            case .device:
                location.addObject("location", point)
                location.add("updateTime", time)
                if let sensor = fix.sensor { location.add("locationSensor", sensor.fleetEngineName) }
                if let accuracy = fix.accuracyMeters { location.add("latlngAccuracy", accuracy) }
            }
            if let heading = fix.heading { location.add("heading", heading) }
            if let speed = fix.speedMetersPerSecond { location.add("speed", speed) }
            if let altitude = fix.altitudeMeters { location.add("altitude", altitude) }
        }
        for _ in 0..<2_000 {
            let mode = LocationMode.allCases.randomElement(using: &generator)!
            let update = VehicleLocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: "v"), lastLocation: randomFix(),
                                               pastLocations: (0..<Int.random(in: 0...4, using: &generator)).map { _ in randomFix() })
            var expected = JSONObjectWriter()
            expected.addObject("lastLocation") { reference(update.lastLocation, mode, &$0) }
            if !update.pastLocations.isEmpty {
                expected.addObjects("pastLocations", update.pastLocations) { reference($1, mode, &$0) }
            }
            let body = FleetEngineRequest(update: update, provider: "p", mode: mode).body
            guard body == expected.json else {
                Issue.record("\(mode): \(body) is not \(expected.json)")
                return
            }
        }
    }

    @Test func neverSendsOutputOnlyOrDeprecatedFields() {
        for mode in LocationMode.allCases {
            let update = VehicleLocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: "v"), lastLocation: fullFix,
                                               pastLocations: [olderFix])
            let body = FleetEngineRequest(update: update, provider: "p", mode: mode).body
            for field in ["serverTime", "FLEET_ENGINE_LOCATION", "horizontalAccuracy", "speedKmph", "roadSnapped"] {
                #expect(!body.contains(field))
            }
        }
    }

    @Test func sensorsMapToFleetEngineNames() {
        let expected: [LocationSensor: String] = [
            .gps: "GPS", .network: "NETWORK", .passive: "PASSIVE", .fused: "FUSED_LOCATION_PROVIDER",
            .roadSnapped: "ROAD_SNAPPED_LOCATION_PROVIDER", .customerSupplied: "CUSTOMER_SUPPLIED_LOCATION",
        ]
        for sensor in LocationSensor.allCases { #expect(sensor.fleetEngineName == expected[sensor]) }
    }
}

@Suite struct RFC3339Tests {
    @Test(arguments: [
        ("2026-11-22T21:00:00.123Z", Int64(1_795_381_200_123)),
        ("2026-11-22T21:00:00Z", 1_795_381_200_000),
        ("2026-11-22T23:00:00.5+02:00", 1_795_381_200_500),
        ("2026-11-22t20:00:00.000-01:00", 1_795_381_200_000),
        ("2026-11-22t21:00:00.123z", 1_795_381_200_123),
        ("2026-11-22T21:00:00.123456789012345678901234Z", 1_795_381_200_123),
        ("1970-01-01T00:00:00Z", 0),
        ("2024-02-29T00:00:00Z", 1_709_164_800_000),
    ])
    func parses(text: String, milliseconds: Int64) {
        #expect(RFC3339.parseMilliseconds(text) == milliseconds)
    }

    @Test(arguments: ["yesterday", "2026-13-45T99:00:00Z", "2026-11-22 21:00:00", "2026-11-22T21:00:00",
                      "2025-02-29T00:00:00Z", "2026-11-22T21:00:00.Z", "2026-11-22T21:00:00+0200"])
    func rejects(text: String) {
        #expect(RFC3339.parseMilliseconds(text) == nil)
    }

    @Test func formatsRoundTrip() {
        for milliseconds: Int64 in [0, 1_795_381_200_123, 951_782_400_001, 4_102_444_799_999] {
            #expect(RFC3339.parseMilliseconds(RFC3339.format(milliseconds: milliseconds)) == milliseconds)
        }
        #expect(RFC3339.format(milliseconds: 1_795_381_200_123) == "2026-11-22T21:00:00.123Z")
    }

    /// A body writes a four-digit year's time in place and any other time as `format` spells it.
    @Test(arguments: [
        (Int64(-62_167_219_200_000), "0000-01-01T00:00:00.000Z"), (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        (253_402_300_800_000, "10000-01-01T00:00:00.000Z"), (-1, "1969-12-31T23:59:59.999Z"),
        (1_795_381_200_123, "2026-11-22T21:00:00.123Z"),
    ])
    func bodiesCarryEveryTimeAsFormatted(milliseconds: Int64, text: String) throws {
        #expect(RFC3339.format(milliseconds: milliseconds) == text)
        #expect(RFC3339.hasFourDigitYear(milliseconds) == (text.utf8.count == RFC3339.fourDigitYearLength))
        #expect(!RFC3339.hasFourDigitYear(-62_167_219_200_001))
        let fix = LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: milliseconds)
        let update = VehicleLocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: "v"), lastLocation: fix)
        for mode in LocationMode.allCases {
            let body = try JSONParser.parse(FleetEngineRequest(update: update, provider: "p", mode: mode).body)
            let field = mode == .supplemental ? "supplementalLocationTime" : "updateTime"
            #expect(body["lastLocation"]?[field] == .string(text))
        }
    }
}

@Suite struct FleetEngineOutcomeTests {
    @Test func classifiesStatusesPerContract() {
        #expect(FleetEngineOutcome.classify(status: 200) == .accepted)
        #expect(FleetEngineOutcome.classify(status: 400) == .rejected(.invalid))
        #expect(FleetEngineOutcome.classify(status: 401) == .unauthenticated)
        #expect(FleetEngineOutcome.classify(status: 403) == .permissionDenied)
        #expect(FleetEngineOutcome.classify(status: 404) == .rejected(.vehicleNotFound))
        for status in [408, 429, 500, 502, 503, 504] {
            #expect(FleetEngineOutcome.classify(status: status, retryAfterSeconds: 2)
                == .transient(cause: .status(status), retryAfterSeconds: 2))
        }
    }

    @Test func readsRetryAfterInBothForms() {
        #expect(RetryAfter.seconds(from: "7") == 7)
        #expect(RetryAfter.seconds(from: nil) == nil)
        #expect(RetryAfter.seconds(from: "soon") == nil)
        let now = RFC3339.parseMilliseconds("2015-10-21T07:28:00Z")!
        let seconds = RetryAfter.seconds(from: "Wed, 21 Oct 2015 07:28:30 GMT",
                                         now: .init(timeIntervalSince1970: Double(now) / 1000))
        #expect(seconds == 30)
    }
}
