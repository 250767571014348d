import FleetEngine
import FleetModel
import InputFormats
import Relay
import Testing

@Suite struct LocationEventDecoderTests {
    /// 2026-11-22T21:01:00Z: just after the samples' fixes.
    let decoder = LocationEventDecoder(defaultKind: .vehicle, nowMilliseconds: { 1_795_381_260_000 })

    @Test func everyGoodSampleDecodes() throws {
        let samples = try Fixtures.good
        #expect(samples.count == 7)
        for sample in samples {
            let result = decoder.decode(key: sample.key, value: sample.value)
            guard case .success = result else {
                Issue.record("good sample rejected: \(result) for \(String(decoding: sample.value, as: UTF8.self))")
                continue
            }
        }
    }

    /// A fix stores its optional measures without optionals: each reads back as decoded, zero
    /// and a negative altitude included, an absent one reads as absent, and two fixes that lack
    /// the same measures are equal.
    @Test func optionalMeasuresReadBackAsDecoded() throws {
        func fix(_ fields: String) throws -> LocationFix {
            let value = #"{"vehicle_id":"v-1","lat":1.5,"lng":2.5,"recorded_at":"2026-11-22T21:00:00Z"\#(fields)}"#
            return try decoder.decode(key: nil, value: Array(value.utf8)).get().fix
        }
        let full = try fix(#","heading":0,"speed_mps":0,"accuracy_m":3.25,"altitude_m":-12.5,"sensor":"GPS""#)
        #expect(full.heading == 0)
        #expect(full.speedMetersPerSecond == 0)
        #expect(full.accuracyMeters == 3.25)
        #expect(full.altitudeMeters == -12.5)
        #expect(full.sensor == .gps)
        let bare = try fix(#","heading":359"#)
        #expect(bare.heading == 359)
        #expect(bare.speedMetersPerSecond == nil && bare.accuracyMeters == nil && bare.altitudeMeters == nil && bare.sensor == nil)
        #expect(try fix("") == fix(""))
        #expect(try fix("").heading == nil)
        #expect(full != bare)
        var cleared = full
        (cleared.heading, cleared.speedMetersPerSecond, cleared.accuracyMeters, cleared.altitudeMeters, cleared.sensor) = (nil, nil, nil, nil, nil)
        #expect(cleared == (try fix("")))
    }

    /// Strings read as the text they spell: escapes in the id, the time and the sensor are
    /// decoded (the key is compared with the id decoded), and a time of another type is named.
    @Test func escapedStringsReadAsTheTextTheySpell() throws {
        let value = #"{"vehicle_id":"veh\u002d1","lat":1,"lng":2,"recorded_at":"2026-11-22T21:00:00\u002e5Z","sensor":"G\u0050S"}"#
        let update = try decoder.decode(key: Array("veh-1".utf8), value: Array(value.utf8)).get()
        #expect(update.vehicle.id == "veh-1")
        #expect(update.fix.recordedAtMilliseconds == 1_795_381_200_500)
        #expect(update.fix.sensor == .gps)
        for (time, type) in [("true", "boolean"), ("[1]", "array"), ("{}", "object")] {
            let value = #"{"vehicle_id":"v","lat":1,"lng":2,"recorded_at":\#(time)}"#
            guard case .failure(let rejection) = decoder.decode(key: nil, value: Array(value.utf8)) else {
                Issue.record("a time of type \(type) accepted")
                continue
            }
            #expect(rejection.reason == .wrongType)
            #expect(rejection.detail == "recorded_at must be a string or a number, not \(type).")
        }
    }

    @Test func everyBadSampleIsRejectedWithItsListedReason() throws {
        let samples = try Fixtures.bad
        #expect(samples.count == 28)
        for sample in samples {
            switch decoder.decode(key: sample.key, value: sample.value) {
            case .success(let update):
                Issue.record("bad sample accepted as \(update): \(String(decoding: sample.value.prefix(120), as: UTF8.self))")
            case .failure(let rejection):
                #expect(rejection.reason.rawValue == sample.reason,
                        "\(String(decoding: sample.value.prefix(120), as: UTF8.self)): \(rejection.detail)")
                #expect(!rejection.detail.isEmpty)
            }
        }
    }

    @Test func everyRejectionReasonOfTheContractIsCoveredBySamples() throws {
        let reasons = Set(try Fixtures.bad.compactMap(\.reason))
        #expect(reasons == Set(RejectionReason.ofTheNativeEvent.map(\.rawValue)))
    }

    @Test func decodesFieldsAsTheContractSays() throws {
        let samples = try Fixtures.good
        let first = try decoder.decode(key: samples[0].key, value: samples[0].value).get()
        #expect(first.vehicle == VehicleIdentity(kind: .vehicle, id: "veh-00001"))
        #expect(first.fix == LocationFix(latitude: 37.422, longitude: -122.0841, recordedAtMilliseconds: 1_795_381_200_123,
                                         heading: 90, speedMetersPerSecond: 12.5, accuracyMeters: 4))
        // Epoch milliseconds, no key.
        #expect(try decoder.decode(key: samples[1].key, value: samples[1].value).get().fix.recordedAtMilliseconds == 1_795_381_200_123)
        // Offset time, heading 359.6 wraps to 0, altitude and sensor kept.
        let fourth = try decoder.decode(key: samples[3].key, value: samples[3].value).get()
        #expect(fourth.fix.recordedAtMilliseconds == 1_795_381_200_500)
        #expect(fourth.fix.heading == 0)
        #expect(fourth.fix.altitudeMeters == -12.5)
        #expect(fourth.fix.sensor == .gps)
        // Kind from the event.
        let fifth = try decoder.decode(key: samples[4].key, value: samples[4].value).get()
        #expect(fifth.vehicle.kind == .deliveryVehicle)
        #expect(fifth.fix.sensor == .fused)
        // null means absent; unknown fields are ignored.
        #expect(try decoder.decode(key: samples[5].key, value: samples[5].value).get().fix.heading == nil)
        // Non-ASCII ids and keys.
        #expect(try decoder.decode(key: samples[6].key, value: samples[6].value).get().vehicle.id == "Fahrzeug-ü")
    }

    /// A field named twice counts with its last value (RFC 8259 leaves it open; parsed into a
    /// dictionary, as the mapping does, the last one wins too).
    @Test func aRepeatedFieldCountsWithItsLastValue() throws {
        let value = Array(#"{"vehicle_id":"veh-1","lat":91,"lng":2,"lat":1.5,"recorded_at":1795381200000}"#.utf8)
        let update = try decoder.decode(key: nil, value: value).get()
        #expect(update.fix.latitude == 1.5)
        let array = decoder.decode(key: nil, value: Array("[1]".utf8))
        #expect(array.failureReason == .notObject)
    }

    /// Short ids are stored inside the string and long ones on the heap: both are compared with
    /// the key byte for byte, and so is an id of non-ASCII characters.
    @Test func theRecordKeyMustBeTheVehicleIdByteForByte() {
        func reason(key: String, id: String) -> RejectionReason? {
            let value = #"{"vehicle_id":"\#(id)","lat":1,"lng":2,"recorded_at":1795381200000}"#
            return decoder.decode(key: Array(key.utf8), value: Array(value.utf8)).failureReason
        }
        let long = String(repeating: "vehicle-", count: 7) + "42"
        let accented = "véhicule-7"
        for id in ["v", "veh-000123", long, accented] {
            #expect(reason(key: id, id: id) == nil, "key \(id)")
            #expect(reason(key: id + "0", id: id) == .keyMismatch, "key longer than \(id)")
            #expect(reason(key: String(id.dropLast()), id: id) == .keyMismatch, "key shorter than \(id)")
        }
        #expect(reason(key: "veh-000124", id: "veh-000123") == .keyMismatch)
        #expect(reason(key: String(long.dropLast()) + "3", id: long) == .keyMismatch)
        #expect(reason(key: "vehicule-7", id: accented) == .keyMismatch)
        #expect(reason(key: "v", id: String(repeating: "v", count: 65)) == .badVehicleId)
        #expect(reason(key: String(repeating: "v", count: 64), id: String(repeating: "v", count: 64)) == nil)
    }

    @Test func defaultKindComesFromConfiguration() throws {
        let delivery = LocationEventDecoder(defaultKind: .deliveryVehicle, nowMilliseconds: { 1_795_381_260_000 })
        let sample = try Fixtures.good[0]
        #expect(try delivery.decode(key: sample.key, value: sample.value).get().vehicle.kind == .deliveryVehicle)
    }

    @Test func futureLimitIsFiveMinutes() {
        func decode(_ recordedAt: Int64) -> Result<LocationUpdate, Rejection> {
            decoder.decode(key: nil, value: Array("{\"vehicle_id\":\"v\",\"lat\":1,\"lng\":2,\"recorded_at\":\(recordedAt)}".utf8))
        }
        #expect((try? decode(1_795_381_260_000 + 300_000).get()) != nil)
        guard case .failure(let rejection) = decode(1_795_381_260_000 + 300_001) else {
            Issue.record("a fix 5 min + 1 ms ahead was accepted")
            return
        }
        #expect(rejection.reason == .futureTimestamp)
    }
}

extension Result where Failure == Rejection {
    var failureReason: RejectionReason? {
        if case .failure(let rejection) = self { rejection.reason } else { nil }
    }
}
