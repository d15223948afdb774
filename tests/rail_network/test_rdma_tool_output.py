"""Parsing of ibv_devinfo and ib_write_bw output.

The samples are stand-ins written in the tools' output format (rdma-core's ibv_devinfo, perftest's
ib_write_bw --report_gbits); no RDMA device exists on the test machines to record real ones.
"""

from __future__ import annotations

IBV_DEVINFO_STANDIN = """\
hca_id:\troceP2p1s0f1
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.45.1200
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t1024 (3)
\t\t\tlink_layer:\t\tEthernet
"""

IB_WRITE_BW_STANDIN = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : rocep1s0f1
 Number of qps   : 1\t\tTransport type : IB
 TX depth        : 128
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 3
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      1803312          0.00               187.53               0.357688
---------------------------------------------------------------------------------------
"""


def test_active_mtu(rail_filters):
    assert rail_filters.ibv_active_mtu(IBV_DEVINFO_STANDIN) == 1024
    assert rail_filters.ibv_active_mtu(IBV_DEVINFO_STANDIN.replace("1024 (3)", "4096 (5)")) == 4096


def test_active_mtu_missing(rail_filters):
    assert rail_filters.ibv_active_mtu("No IB devices found\n") is None


def test_bandwidth_average_not_peak(rail_filters):
    assert rail_filters.ib_write_bw_gbps(IB_WRITE_BW_STANDIN) == 187.53


def test_bandwidth_without_result_row(rail_filters):
    failed = IB_WRITE_BW_STANDIN.split(" 65536")[0] + " Couldn't connect to 192.168.100.11:18515\n"
    assert rail_filters.ib_write_bw_gbps(failed) is None
    assert rail_filters.ib_write_bw_gbps("") is None


def test_filters_are_registered(rail_filters):
    filters = rail_filters.FilterModule().filters()
    assert filters["rail_network_ibv_active_mtu"] is rail_filters.ibv_active_mtu
    assert filters["rail_network_ib_write_bw_gbps"] is rail_filters.ib_write_bw_gbps
